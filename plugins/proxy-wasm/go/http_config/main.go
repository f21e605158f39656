// A Proxy-Wasm filter configured per route, written with the Go SDK
// (standard Go, wasip1, c-shared): the same contract as the Rust http_config
// filter. The plugin configuration, taken verbatim as a UTF-8 string, is
// returned on every response in header `custom-header`. A configuration
// that is missing, empty or not valid UTF-8 makes OnPluginStart fail, so
// the host refuses the plugin.
package main

import (
	"errors"
	"unicode/utf8"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

type plugin struct {
	types.DefaultPluginContext
	header string
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	conf, err := proxywasm.GetPluginConfiguration()
	switch {
	case err != nil && !errors.Is(err, types.ErrorStatusNotFound):
		proxywasm.LogWarnf("http_config: reading the plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	case len(conf) == 0:
		// The SDK reports an empty buffer as NotFound, so "missing" and
		// "empty" look the same here; neither gives a header to send.
		proxywasm.LogWarn("http_config: no plugin configuration")
		return types.OnPluginStartStatusFailed
	case !utf8.Valid(conf):
		proxywasm.LogWarn("http_config: plugin configuration is not UTF-8")
		return types.OnPluginStartStatusFailed
	}
	p.header = string(conf)
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext {
	// Go strings are immutable, so every stream can share the same value.
	return &filter{header: p.header}
}

type filter struct {
	types.DefaultHttpContext
	header string
}

func (f *filter) OnHttpResponseHeaders(int, bool) types.Action {
	if err := proxywasm.AddHttpResponseHeader("custom-header", f.header); err != nil {
		proxywasm.LogErrorf("http_config: adding custom-header: %v", err)
	}
	return types.ActionContinue
}
