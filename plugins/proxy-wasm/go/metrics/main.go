// Proxy-Wasm metrics written with the Go SDK (standard Go, wasip1,
// c-shared): the contract of the Rust metrics filter, under names with a
// `go_` prefix. Metric names are global to the host process, so the prefix
// lets this filter and the Rust one be loaded side by side without feeding
// each other's metrics. The plugin context defines counter
// `go_wasm_requests_total`, gauge `go_wasm_last_request_headers` and
// histogram `go_wasm_request_header_count`. Every request adds one to the
// counter, sets the gauge to its number of request headers and records that
// number in the histogram; its response carries the counter's value, read
// back from the host, in `x-requests-seen`.
package main

import (
	"fmt"
	"strconv"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

const (
	requestsName    = "go_wasm_requests_total"
	lastHeadersName = "go_wasm_last_request_headers"
	headerCountName = "go_wasm_request_header_count"
)

type metrics struct {
	requests    proxywasm.MetricCounter
	lastHeaders proxywasm.MetricGauge
	headerCount proxywasm.MetricHistogram
}

// setGauge sets a gauge to an absolute value. The ABI does this with
// proxy_record_metric, which the SDK only exposes on MetricHistogram (its
// gauge type offers Add alone); the metric ids are the same kind of handle,
// so the call is made through that type. Add(v - Value()) would be two
// calls, and another instance could write in between.
func setGauge(g proxywasm.MetricGauge, value uint64) {
	proxywasm.MetricHistogram(g).Record(value)
}

// guard runs f, turning the panic the SDK's metric methods raise on a host
// error into an error, so a failed metric call is logged instead of
// crashing the stream.
func guard(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}

type plugin struct {
	types.DefaultPluginContext
	ids *metrics
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	// A host with Envoy's semantics returns the existing id for a name that
	// is already defined, so a reconfigured plugin (or another instance)
	// feeds the same metrics instead of new ones.
	var m metrics
	if err := guard(func() {
		m.requests = proxywasm.DefineCounterMetric(requestsName)
		m.lastHeaders = proxywasm.DefineGaugeMetric(lastHeadersName)
		m.headerCount = proxywasm.DefineHistogramMetric(headerCountName)
	}); err != nil {
		proxywasm.LogWarnf("metrics: defining: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.ids = &m
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext {
	return &filter{ids: p.ids}
}

type filter struct {
	types.DefaultHttpContext
	// nil only if the host never started the plugin; the stream then goes
	// through uncounted rather than failing.
	ids *metrics
}

func (f *filter) OnHttpRequestHeaders(int, bool) types.Action {
	if f.ids == nil {
		return types.ActionContinue
	}
	// Counted from the header map itself rather than the callback argument,
	// so the number is what this filter actually sees.
	headers, _ := proxywasm.GetHttpRequestHeaders()
	n := uint64(len(headers))
	if err := guard(func() {
		f.ids.requests.Increment(1)
		setGauge(f.ids.lastHeaders, n)
		f.ids.headerCount.Record(n)
	}); err != nil {
		proxywasm.LogWarnf("metrics: recording: %v", err)
	}
	return types.ActionContinue
}

func (f *filter) OnHttpResponseHeaders(int, bool) types.Action {
	if f.ids == nil {
		return types.ActionContinue
	}
	var seen uint64
	if err := guard(func() { seen = f.ids.requests.Value() }); err != nil {
		proxywasm.LogWarnf("metrics: reading %s: %v", requestsName, err)
		return types.ActionContinue
	}
	if err := proxywasm.AddHttpResponseHeader("x-requests-seen", strconv.FormatUint(seen, 10)); err != nil {
		proxywasm.LogErrorf("metrics: adding x-requests-seen: %v", err)
	}
	return types.ActionContinue
}
