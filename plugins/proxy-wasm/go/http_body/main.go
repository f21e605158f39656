// A Proxy-Wasm body rewriting filter written with the Go SDK (standard Go,
// wasip1, c-shared): the same contract as the Rust http_body filter. Both
// bodies are held by the host until they are complete, then inspected whole:
//   - a response body containing the bytes `secret` becomes
//     `Original message body (<N> bytes) redacted.\n`, N being its length;
//   - a request body containing `secret` becomes `redacted` before it goes
//     upstream.
//
// Other bodies pass unchanged. `content-length` is dropped from the request
// and response headers, since the body may change length.
package main

import (
	"bytes"
	"fmt"
	"math"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

var needle = []byte("secret")

type plugin struct {
	types.DefaultPluginContext
}

func (*plugin) NewHttpContext(uint32) types.HttpContext { return &filter{} }

type filter struct {
	types.DefaultHttpContext
}

func (*filter) OnHttpRequestHeaders(int, bool) types.Action {
	// A rewritten body has a new size; a stale length would leave the
	// upstream waiting for bytes that never come, or cut the body short.
	_ = proxywasm.RemoveHttpRequestHeader("content-length")
	return types.ActionContinue
}

func (*filter) OnHttpRequestBody(_ int, endOfStream bool) types.Action {
	if !endOfStream {
		// Pausing each chunk keeps the host buffering, so the final call
		// sees the whole body rather than only its last chunk.
		return types.ActionPause
	}
	// Read the whole buffer instead of relying on the size argument, which
	// some hosts give per chunk.
	body, _ := proxywasm.GetHttpRequestBody(0, math.MaxInt32)
	if bytes.Contains(body, needle) {
		if err := proxywasm.ReplaceHttpRequestBody([]byte("redacted")); err != nil {
			proxywasm.LogErrorf("http_body: replacing the request body: %v", err)
		}
	}
	return types.ActionContinue
}

func (*filter) OnHttpResponseHeaders(int, bool) types.Action {
	// The response body may change size too.
	_ = proxywasm.RemoveHttpResponseHeader("content-length")
	return types.ActionContinue
}

func (*filter) OnHttpResponseBody(_ int, endOfStream bool) types.Action {
	if !endOfStream {
		return types.ActionPause
	}
	body, _ := proxywasm.GetHttpResponseBody(0, math.MaxInt32)
	if bytes.Contains(body, needle) {
		replacement := fmt.Sprintf("Original message body (%d bytes) redacted.\n", len(body))
		if err := proxywasm.ReplaceHttpResponseBody([]byte(replacement)); err != nil {
			proxywasm.LogErrorf("http_body: replacing the response body: %v", err)
		}
	}
	return types.ActionContinue
}
