// A Proxy-Wasm JSON request validator written with the Go SDK (standard Go,
// wasip1, c-shared): the same contract as the Rust json_validation filter. A
// request whose content-type is not `application/json` is answered with 403
// `content-type must be application/json\n`. Otherwise its whole body is
// buffered and must be a JSON object holding every key listed in plugin
// configuration `{"requiredKeys":[...]}` (default `id` and `token`), or it is
// answered with 403 `invalid payload\n`. Valid requests go upstream unchanged.
package main

import (
	"encoding/json"
	"math"
	"mime"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

var defaultRequiredKeys = []string{"id", "token"}

type config struct {
	// A pointer tells "absent" (use the defaults) from an explicit list.
	RequiredKeys *[]string `json:"requiredKeys"`
}

type plugin struct {
	types.DefaultPluginContext
	required []string
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	p.required = defaultRequiredKeys
	conf, err := proxywasm.GetPluginConfiguration()
	if err != nil || len(conf) == 0 {
		return types.OnPluginStartStatusOK
	}
	// A malformed configuration is refused rather than replaced by the
	// defaults: validating against keys nobody asked for hides the typo.
	var c config
	if err := json.Unmarshal(conf, &c); err != nil {
		proxywasm.LogWarnf("json_validation: bad plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	if c.RequiredKeys != nil {
		p.required = *c.RequiredKeys
	}
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext {
	return &filter{required: p.required}
}

type filter struct {
	types.DefaultHttpContext
	required []string
}

// isJSON reports whether a content-type names JSON. Parameters such as
// `; charset=utf-8` are ignored: they do not change what the body is.
func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mediaType = strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0])
	}
	return strings.EqualFold(mediaType, "application/json")
}

func (f *filter) reject(body string) types.Action {
	headers := [][2]string{{"content-type", "text/plain"}}
	if err := proxywasm.SendHttpResponse(403, headers, []byte(body), -1); err != nil {
		proxywasm.LogErrorf("json_validation: sending 403: %v", err)
	}
	return types.ActionPause
}

func (f *filter) OnHttpRequestHeaders(_ int, endOfStream bool) types.Action {
	contentType, err := proxywasm.GetHttpRequestHeader("content-type")
	if err != nil || !isJSON(contentType) {
		return f.reject("content-type must be application/json\n")
	}
	// With no body to come, OnHttpRequestBody is never called; an empty body
	// is not a JSON object, so decide here.
	if endOfStream {
		return f.reject("invalid payload\n")
	}
	return types.ActionContinue
}

func (f *filter) OnHttpRequestBody(_ int, endOfStream bool) types.Action {
	if !endOfStream {
		// Keep the host buffering until the body is complete.
		return types.ActionPause
	}
	// Ask for everything buffered rather than trusting the size argument,
	// which some hosts report per chunk.
	body, err := proxywasm.GetHttpRequestBody(0, math.MaxInt32)
	if err != nil || !f.valid(body) {
		return f.reject("invalid payload\n")
	}
	return types.ActionContinue
}

func (f *filter) valid(body []byte) bool {
	// Decoding into a map rejects anything that is not a JSON object.
	var object map[string]json.RawMessage
	if err := json.Unmarshal(body, &object); err != nil || object == nil {
		return false
	}
	for _, key := range f.required {
		if _, ok := object[key]; !ok {
			return false
		}
	}
	return true
}
