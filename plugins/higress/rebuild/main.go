// rebuild: a Higress (wasm-go) filter that asks its host to replace its VM
// every `every` requests (the framework's WithRebuildAfterRequests, which
// sets the property `wasm_need_rebuild`), and reports on each response how
// many requests its VM has served (`x-vm-requests`) and the VM's linear
// memory as the host reports it (`x-vm-memory`, property `plugin_vm_memory`).
// A host that honours the request starts counting from 1 again.
package main

import (
	"encoding/binary"
	"strconv"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/higress-group/wasm-go/pkg/wrapper"
	"github.com/tidwall/gjson"
)

// How many requests this VM has seen.
var served int

func main() {}

func init() {
	wrapper.SetCtx(
		"rebuild",
		wrapper.ParseConfig(parseConfig),
		wrapper.ProcessRequestHeaders(onRequestHeaders),
		wrapper.ProcessResponseHeaders(onResponseHeaders),
		wrapper.WithRebuildAfterRequests[Config](3),
	)
}

type Config struct{}

func parseConfig(gjson.Result, *Config) error { return nil }

func onRequestHeaders(ctx wrapper.HttpContext, _ Config) types.Action {
	served++
	ctx.SetContext("served", served)
	return types.ActionContinue
}

func onResponseHeaders(ctx wrapper.HttpContext, _ Config) types.Action {
	count, _ := ctx.GetContext("served").(int)
	_ = proxywasm.AddHttpResponseHeader("x-vm-requests", strconv.Itoa(count))
	if memory, err := proxywasm.GetProperty([]string{"plugin_vm_memory"}); err == nil && len(memory) == 8 {
		bytes := binary.LittleEndian.Uint64(memory)
		_ = proxywasm.AddHttpResponseHeader("x-vm-memory", strconv.FormatUint(bytes, 10))
	}
	return types.ActionContinue
}
