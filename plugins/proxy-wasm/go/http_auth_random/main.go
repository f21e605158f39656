// A Proxy-Wasm authorization filter that consults an upstream, written with
// the Go SDK (standard Go, wasip1, c-shared): the same contract as the Rust
// http_auth_random filter. Each request is held while `GET /bytes/1`
// (`:authority: auth`, plus the request's `x-token`, empty if absent) goes
// to the upstream named by plugin configuration `{"upstream":"<name>"}`
// (default `auth`). When the answer's body ends in an even byte the request
// continues upstream with `x-auth: allowed`; any other answer, an empty or
// failed one included, gets a local 403 `Access forbidden.\n` with
// `x-auth: denied`. If the call cannot be dispatched at all the request is
// answered with 503 `auth upstream unavailable\n`.
package main

import (
	"encoding/json"
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext {
		return &plugin{upstream: defaultUpstream}
	})
}

const (
	defaultUpstream = "auth"
	callTimeoutMs   = 5000
)

// parseUpstream reads `{"upstream":"<name>"}`. The key may be left out (the
// default applies) and other keys are ignored, but the configuration must be
// a JSON object and `upstream`, when given, a string; `null` is not one.
// The key is matched exactly, not case-insensitively as struct decoding
// would.
func parseUpstream(conf []byte) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(conf, &fields); err != nil {
		return "", err
	}
	if fields == nil {
		return "", errors.New("the configuration must be a JSON object")
	}
	raw, ok := fields["upstream"]
	if !ok {
		return defaultUpstream, nil
	}
	var upstream string
	if string(raw) == "null" || json.Unmarshal(raw, &upstream) != nil {
		return "", errors.New("`upstream` must be a string")
	}
	return upstream, nil
}

type plugin struct {
	types.DefaultPluginContext
	upstream string
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	conf, err := proxywasm.GetPluginConfiguration()
	if err != nil || len(conf) == 0 {
		// Nothing configured: authorize against the default upstream.
		p.upstream = defaultUpstream
		return types.OnPluginStartStatusOK
	}
	// A configuration that is present but malformed is refused rather than
	// quietly replaced by the default upstream.
	upstream, err := parseUpstream(conf)
	if err != nil {
		proxywasm.LogWarnf("http_auth_random: bad plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.upstream = upstream
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext {
	return &filter{upstream: p.upstream}
}

type filter struct {
	types.DefaultHttpContext
	upstream string
}

func (f *filter) OnHttpRequestHeaders(int, bool) types.Action {
	token, _ := proxywasm.GetHttpRequestHeader("x-token")
	headers := [][2]string{
		{":method", "GET"},
		{":path", "/bytes/1"},
		{":authority", "auth"},
		{"x-token", token},
	}
	if _, err := proxywasm.DispatchHttpCall(f.upstream, headers, nil, nil, callTimeoutMs, f.onAuthResponse); err != nil {
		proxywasm.LogWarnf("http_auth_random: dispatch to %s failed: %v", f.upstream, err)
		if err := proxywasm.SendHttpResponse(503, nil, []byte("auth upstream unavailable\n"), -1); err != nil {
			proxywasm.LogErrorf("http_auth_random: sending 503: %v", err)
		}
	}
	// Paused in both cases: until the answer arrives, or for good now that
	// a local response has been sent.
	return types.ActionPause
}

// onAuthResponse runs with this stream as the effective context (the SDK
// sets it before calling back), so the request hostcalls below act on it.
func (f *filter) onAuthResponse(_, bodySize, _ int) {
	// A failed or timed-out call arrives with no body; only a positive
	// answer lets the request through, so that is a denial.
	body, _ := proxywasm.GetHttpCallResponseBody(0, bodySize)
	if n := len(body); n > 0 && body[n-1]%2 == 0 {
		if err := proxywasm.AddHttpRequestHeader("x-auth", "allowed"); err != nil {
			proxywasm.LogErrorf("http_auth_random: adding x-auth: %v", err)
		}
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogErrorf("http_auth_random: resuming: %v", err)
		}
		return
	}
	headers := [][2]string{{"x-auth", "denied"}}
	if err := proxywasm.SendHttpResponse(403, headers, []byte("Access forbidden.\n"), -1); err != nil {
		proxywasm.LogErrorf("http_auth_random: sending 403: %v", err)
	}
}
