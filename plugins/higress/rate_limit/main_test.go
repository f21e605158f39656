package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/higress-group/wasm-go/pkg/test"
	"github.com/stretchr/testify/require"
)

var byAPIKey = json.RawMessage(`{
  "redis": {"service_name": "redis.static", "service_port": 6379, "timeout": 1000},
  "limit": 5,
  "window_seconds": 60,
  "key_header": "x-api-key"
}`)

var byHost = json.RawMessage(`{
  "redis": {"service_name": "redis.dns"},
  "limit": 0
}`)

func respCommand(args ...string) string {
	out := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		out += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	return out
}

// sendRequest runs request headers and checks the EVAL that went out; it
// returns the window start that the key names.
func sendRequest(t *testing.T, host test.TestHost, headers [][2]string, wantKey string, window int64) int64 {
	t.Helper()
	host.InitHttp()
	action := host.CallOnHttpRequestHeaders(headers)
	require.Equal(t, types.HeaderStopAllIterationAndWatermark, action)
	calls := host.GetRedisCalloutAttributes()
	require.Len(t, calls, 1)
	query := string(calls[0].Query)
	prefix := "rl:" + wantKey + ":"
	i := strings.Index(query, prefix)
	require.GreaterOrEqual(t, i, 0, "no key %s in %q", prefix, query)
	end := strings.Index(query[i:], "\r\n")
	start, err := strconv.ParseInt(query[i+len(prefix):i+end], 10, 64)
	require.NoError(t, err)
	// Only the shape: the wazero VM of wasm mode has a fixed fake clock
	// (2022-01-01), so the start cannot be compared with time.Now there.
	require.Zero(t, start%window)
	require.Positive(t, start)
	w := strconv.FormatInt(window, 10)
	require.Equal(t, respCommand("eval", windowScript, "1", prefix+strconv.FormatInt(start, 10), w), query)
	return start
}

func TestAllowedCarriesRemaining(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(byAPIKey)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)

		sendRequest(t, host, [][2]string{
			{":authority", "a.test"}, {":path", "/"}, {":method", "GET"}, {"x-api-key", "k1"},
		}, "k1", 60)
		host.CallOnRedisCall(0, []byte(":5\r\n"))
		require.Equal(t, types.ActionContinue, host.GetHttpStreamAction())
		require.Nil(t, host.GetLocalResponse())

		host.CallOnHttpResponseHeaders([][2]string{{":status", "200"}})
		headers := host.GetResponseHeaders()
		require.True(t, test.HasHeaderWithValue(headers, "x-ratelimit-limit", "5"))
		require.True(t, test.HasHeaderWithValue(headers, "x-ratelimit-remaining", "0"))
		reset, ok := test.GetHeaderValue(headers, "x-ratelimit-reset")
		require.True(t, ok)
		n, err := strconv.Atoi(reset)
		require.NoError(t, err)
		require.True(t, n >= 1 && n <= 60, reset)
		require.False(t, test.HasHeader(headers, "x-ratelimit-error"))
		host.CompleteHttp()
	})
}

func TestOverLimitGets429(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(byAPIKey)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)

		sendRequest(t, host, [][2]string{
			{":authority", "a.test"}, {":path", "/"}, {":method", "GET"}, {"x-api-key", "k1"},
		}, "k1", 60)
		host.CallOnRedisCall(0, []byte(":6\r\n"))
		local := host.GetLocalResponse()
		require.NotNil(t, local)
		require.Equal(t, uint32(429), local.StatusCode)
		require.Equal(t, "rate_limit.limit_exceeded", local.StatusCodeDetail)
		require.True(t, test.HasHeaderWithValue(local.Headers, "x-ratelimit-limit", "5"))
		require.True(t, test.HasHeaderWithValue(local.Headers, "x-ratelimit-remaining", "0"))
		require.True(t, test.HasHeader(local.Headers, "retry-after"))
		require.Contains(t, string(local.Data), "Too Many Requests")
		require.NotEqual(t, types.ActionContinue, host.GetHttpStreamAction())

		// The local reply passes back through the filter untouched.
		host.CallOnHttpResponseHeaders([][2]string{{":status", "429"}})
		require.False(t, test.HasHeader(host.GetResponseHeaders(), "x-ratelimit-error"))
		host.CompleteHttp()
	})
}

func TestKeyFallbacks(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(byAPIKey)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)
		sendRequest(t, host, [][2]string{{":authority", "a.test"}, {":path", "/"}, {":method", "GET"}}, "anonymous", 60)
		host.CallOnRedisCall(0, []byte(":1\r\n"))
		host.CompleteHttp()
	})
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(byHost)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)
		sendRequest(t, host, [][2]string{{":authority", "b.test:8080"}, {":path", "/"}, {":method", "GET"}}, "b.test:8080", 60)
		require.Equal(t, "outbound|6379||redis.dns", host.GetRedisCalloutAttributes()[0].Upstream)
		// limit 0: the first request is already over.
		host.CallOnRedisCall(0, []byte(":1\r\n"))
		require.NotNil(t, host.GetLocalResponse())
		require.Equal(t, uint32(429), host.GetLocalResponse().StatusCode)
		host.CompleteHttp()
	})
}

func TestFailsOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int32
		reply  string
		want   string
	}{
		{"network error", 1, "", "cannot connect to redis cluster"},
		{"script error", 0, "-NOSCRIPT no lua here\r\n", "NOSCRIPT no lua here"},
		{"odd reply", 0, "$2\r\nhi\r\n", `unexpected reply type "$": hi`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			test.RunTest(t, func(t *testing.T) {
				host, status := test.NewTestHost(byAPIKey)
				defer host.Reset()
				require.Equal(t, types.OnPluginStartStatusOK, status)
				sendRequest(t, host, [][2]string{
					{":authority", "a.test"}, {":path", "/"}, {":method", "GET"}, {"x-api-key", "k"},
				}, "k", 60)
				host.CallOnRedisCall(tc.status, []byte(tc.reply))
				require.Equal(t, types.ActionContinue, host.GetHttpStreamAction())
				require.Nil(t, host.GetLocalResponse())
				host.CallOnHttpResponseHeaders([][2]string{{":status", "200"}})
				headers := host.GetResponseHeaders()
				require.True(t, test.HasHeaderWithValue(headers, "x-ratelimit-error", tc.want), "%v", headers)
				require.False(t, test.HasHeader(headers, "x-ratelimit-remaining"))
				host.CompleteHttp()
			})
		})
	}
}

func TestBadConfigs(t *testing.T) {
	for name, cfg := range map[string]string{
		"no limit":       `{"redis": {"service_name": "redis.static"}}`,
		"limit a string": `{"redis": {"service_name": "redis.static"}, "limit": "ten"}`,
		"negative limit": `{"redis": {"service_name": "redis.static"}, "limit": -1}`,
		"zero window":    `{"redis": {"service_name": "redis.static"}, "limit": 1, "window_seconds": 0}`,
		"no redis":       `{"limit": 1}`,
	} {
		t.Run(name, func(t *testing.T) {
			test.RunTest(t, func(t *testing.T) {
				host, status := test.NewTestHost(json.RawMessage(cfg))
				defer host.Reset()
				require.Equal(t, types.OnPluginStartStatusFailed, status)
			})
		})
	}
}
