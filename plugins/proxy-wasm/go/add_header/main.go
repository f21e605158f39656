// A Proxy-Wasm header filter written with the Go SDK (standard Go, wasip1,
// c-shared): the same contract as the Rust add_header filter. Adds
// `x-wasmgate-filter: <plugin configuration>` to the request, and reports the
// request's path and host back in response headers `x-seen-path` and
// `x-seen-host`.
package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

type plugin struct {
	types.DefaultPluginContext
	value string
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	conf, err := proxywasm.GetPluginConfiguration()
	if err != nil || len(conf) == 0 {
		p.value = "on"
	} else {
		p.value = string(conf)
	}
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext {
	return &filter{value: p.value}
}

type filter struct {
	types.DefaultHttpContext
	value string
	path  string
}

func (f *filter) OnHttpRequestHeaders(int, bool) types.Action {
	if err := proxywasm.AddHttpRequestHeader("x-wasmgate-filter", f.value); err != nil {
		proxywasm.LogErrorf("adding a header: %v", err)
	}
	f.path, _ = proxywasm.GetHttpRequestHeader(":path")
	return types.ActionContinue
}

func (f *filter) OnHttpResponseHeaders(int, bool) types.Action {
	_ = proxywasm.ReplaceHttpResponseHeader("x-seen-path", f.path)
	host, _ := proxywasm.GetProperty([]string{"request", "host"})
	_ = proxywasm.ReplaceHttpResponseHeader("x-seen-host", string(host))
	return types.ActionContinue
}

func (f *filter) OnHttpStreamDone() {
	proxywasm.LogInfof("done with %s", f.path)
}
