// A Proxy-Wasm timer written with the Go SDK (standard Go, wasip1,
// c-shared): the same contract as the Rust tick filter. The plugin context
// asks the host for a tick every 50 ms; each tick adds one to the counter
// `ticks` in the VM's shared data, stored as a decimal string and updated
// with compare-and-swap. Every response carries the counter's current value
// in `x-ticks` (0 until the first tick).
//
// Each instance of the module has its own plugin context and timer, so with
// several instances the counter advances once per tick per instance.
package main

import (
	"errors"
	"strconv"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

const (
	key      = "ticks"
	periodMs = 50
)

// parse reads the stored counter. A missing or unreadable value counts as
// 0, so a single bad write cannot stop the counter for good.
func parse(value []byte) uint64 {
	n, err := strconv.ParseUint(string(value), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

type plugin struct {
	types.DefaultPluginContext
}

func (*plugin) OnPluginStart(int) types.OnPluginStartStatus {
	if err := proxywasm.SetTickPeriodMilliSeconds(periodMs); err != nil {
		proxywasm.LogWarnf("tick: setting the tick period: %v", err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (*plugin) OnTick() {
	// Other instances tick as well and write the same key: read, add one,
	// and write back under the CAS token, starting over if another writer
	// got in first.
	for {
		value, cas, err := proxywasm.GetSharedData(key)
		if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
			proxywasm.LogWarnf("tick: get shared data: %v", err)
			return
		}
		next := strconv.FormatUint(parse(value)+1, 10)
		switch err := proxywasm.SetSharedData(key, []byte(next), cas); {
		case err == nil:
			return
		case errors.Is(err, types.ErrorStatusCasMismatch):
			continue
		default:
			proxywasm.LogWarnf("tick: set shared data: %v", err)
			return
		}
	}
}

func (*plugin) NewHttpContext(uint32) types.HttpContext { return &filter{} }

type filter struct {
	types.DefaultHttpContext
}

func (*filter) OnHttpResponseHeaders(int, bool) types.Action {
	value, _, _ := proxywasm.GetSharedData(key)
	if err := proxywasm.AddHttpResponseHeader("x-ticks", strconv.FormatUint(parse(value), 10)); err != nil {
		proxywasm.LogErrorf("tick: adding x-ticks: %v", err)
	}
	return types.ActionContinue
}
