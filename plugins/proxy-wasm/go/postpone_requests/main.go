// A Proxy-Wasm filter that holds every request until the next tick, written
// with the Go SDK (standard Go, wasip1, c-shared): the same contract as the
// Rust postpone_requests filter. Each request gets request header
// `x-postponed: true` and is paused, its context id noted by the plugin
// context. The plugin context ticks every 100 ms and resumes each noted
// request, so a request goes on after roughly one tick.
package main

import (
	"slices"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

const periodMs = 100

type plugin struct {
	types.DefaultPluginContext
	// Context ids of the paused requests, oldest first. An instance runs
	// one callback at a time, so no locking is needed.
	waiting []uint32
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	if err := proxywasm.SetTickPeriodMilliSeconds(periodMs); err != nil {
		proxywasm.LogWarnf("postpone_requests: setting the tick period: %v", err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (p *plugin) OnTick() {
	// Detach the list before resuming anything: a resumed stream may run
	// its next callbacks (and finish) before this loop is over, and those
	// must not edit the slice being walked.
	ids := p.waiting
	p.waiting = nil
	for _, id := range ids {
		// Resuming acts on the effective context, which during a tick is
		// the plugin context: switch to the stream first. A stream that
		// has ended since (client gone) is refused and skipped.
		if err := proxywasm.SetEffectiveContext(id); err != nil {
			proxywasm.LogInfof("postpone_requests: context %d is gone", id)
			continue
		}
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogWarnf("postpone_requests: resuming %d: %v", id, err)
		}
	}
}

func (p *plugin) NewHttpContext(contextID uint32) types.HttpContext {
	return &filter{plugin: p, contextID: contextID}
}

type filter struct {
	types.DefaultHttpContext
	plugin    *plugin
	contextID uint32
}

func (f *filter) OnHttpRequestHeaders(int, bool) types.Action {
	if err := proxywasm.AddHttpRequestHeader("x-postponed", "true"); err != nil {
		proxywasm.LogErrorf("postpone_requests: adding x-postponed: %v", err)
	}
	f.plugin.waiting = append(f.plugin.waiting, f.contextID)
	return types.ActionPause
}

// OnHttpStreamDone forgets a stream that ends while still waiting: the host
// may give its id to a new stream, which the next tick must not resume.
func (f *filter) OnHttpStreamDone() {
	f.plugin.waiting = slices.DeleteFunc(f.plugin.waiting, func(id uint32) bool {
		return id == f.contextID
	})
}
