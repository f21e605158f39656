// A Proxy-Wasm shared queue producer and consumer written with the Go SDK
// (standard Go, wasip1, c-shared): the same contract as the Rust
// shared_queue filter. The plugin context registers queue `messages`, which
// makes it the one the host notifies; each request puts its `:path` on that
// queue. When notified, the plugin context empties the queue, adding one to
// shared data `received` (a decimal string, updated with compare-and-swap)
// per item and storing the newest item in `last_message`. Every response
// reports both, as `x-received` and `x-last-message`.
//
// Draining happens asynchronously: a response may or may not already count
// its own request.
package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

const (
	queueName   = "messages"
	receivedKey = "received"
	lastKey     = "last_message"
)

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
	// Registration is a plugin-context call: it is what routes the host's
	// OnQueueReady notifications here. The id is not kept; OnQueueReady is
	// handed it.
	if _, err := proxywasm.RegisterSharedQueue(queueName); err != nil {
		proxywasm.LogWarnf("shared_queue: registering %s: %v", queueName, err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (*plugin) OnQueueReady(queueID uint32) {
	// One notification can cover several items: keep going until empty.
	for {
		item, err := proxywasm.DequeueSharedQueue(queueID)
		switch {
		case errors.Is(err, types.ErrorStatusEmpty):
			return
		case err != nil:
			proxywasm.LogWarnf("shared_queue: dequeue: %v", err)
			return
		}
		countOne()
		// The newest item simply overwrites the previous one: no CAS
		// needed for a "latest" value.
		if err := proxywasm.SetSharedData(lastKey, item, 0); err != nil {
			proxywasm.LogWarnf("shared_queue: storing %s: %v", lastKey, err)
		}
	}
}

// countOne adds one to `received`. Every instance drains the same queue and
// writes the same key, so the write is retried until its CAS token holds.
func countOne() {
	for {
		value, cas, err := proxywasm.GetSharedData(receivedKey)
		if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
			proxywasm.LogWarnf("shared_queue: get shared data: %v", err)
			return
		}
		next := strconv.FormatUint(parse(value)+1, 10)
		switch err := proxywasm.SetSharedData(receivedKey, []byte(next), cas); {
		case err == nil:
			return
		case errors.Is(err, types.ErrorStatusCasMismatch):
			continue
		default:
			proxywasm.LogWarnf("shared_queue: set shared data: %v", err)
			return
		}
	}
}

func (*plugin) NewHttpContext(uint32) types.HttpContext { return &filter{} }

type filter struct {
	types.DefaultHttpContext
}

func (*filter) OnHttpRequestHeaders(int, bool) types.Action {
	// Looked up on every request, the way a producer that did not register
	// the queue would do it; an empty VM id means this VM's own queues.
	queueID, err := proxywasm.ResolveSharedQueue("", queueName)
	if err != nil {
		proxywasm.LogWarnf("shared_queue: queue %s not found: %v", queueName, err)
		return types.ActionContinue
	}
	path, _ := proxywasm.GetHttpRequestHeader(":path")
	if path == "" {
		// The SDK cannot enqueue an empty item (it indexes data[0]).
		proxywasm.LogWarn("shared_queue: no :path to enqueue")
		return types.ActionContinue
	}
	if err := proxywasm.EnqueueSharedQueue(queueID, []byte(path)); err != nil {
		proxywasm.LogWarnf("shared_queue: enqueue: %v", err)
	}
	return types.ActionContinue
}

func (*filter) OnHttpResponseHeaders(int, bool) types.Action {
	received, _, _ := proxywasm.GetSharedData(receivedKey)
	last, _, _ := proxywasm.GetSharedData(lastKey)
	if err := proxywasm.AddHttpResponseHeader("x-received", strconv.FormatUint(parse(received), 10)); err != nil {
		proxywasm.LogErrorf("shared_queue: adding x-received: %v", err)
	}
	// Invalid UTF-8 is replaced, as the Rust filter's lossy decoding does.
	message := strings.ToValidUTF8(string(last), "\uFFFD")
	if err := proxywasm.AddHttpResponseHeader("x-last-message", message); err != nil {
		proxywasm.LogErrorf("shared_queue: adding x-last-message: %v", err)
	}
	return types.ActionContinue
}
