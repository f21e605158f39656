package main

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/higress-group/wasm-go/pkg/test"
	"github.com/stretchr/testify/require"
)

var baseConfig = json.RawMessage(`{
  "redis": {"service_name": "redis.static", "service_port": 6379, "username": "", "password": "", "timeout": 1000, "database": 0},
  "key_prefix": "count:",
  "key_header": ""
}`)

var headerConfig = json.RawMessage(`{
  "redis": {"service_name": "redis.dns", "database": 2},
  "key_prefix": "user:",
  "key_header": "X-User"
}`)

// respCommand encodes a command the way the framework sends it: an array of
// bulk strings.
func respCommand(args ...string) string {
	out := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		out += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	return out
}

func TestConfig(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(baseConfig)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)
	})
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(json.RawMessage(`{"key_prefix": "x:"}`))
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusFailed, status)
	})
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(json.RawMessage(`{"redis": {"service_port": 6379}}`))
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusFailed, status)
	})
}

func TestCountsByHost(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(baseConfig)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)

		action := host.CallOnHttpRequestHeaders([][2]string{
			{":authority", "example.com"}, {":path", "/"}, {":method", "GET"},
		})
		require.Equal(t, types.HeaderStopAllIterationAndWatermark, action)
		calls := host.GetRedisCalloutAttributes()
		require.Len(t, calls, 1)
		require.Equal(t, "outbound|6379||redis.static", calls[0].Upstream)
		require.Equal(t, respCommand("incr", "count:example.com"), string(calls[0].Query))

		host.CallOnRedisCall(0, []byte(":7\r\n"))
		require.Equal(t, types.ActionContinue, host.GetHttpStreamAction())

		host.CallOnHttpResponseHeaders([][2]string{{":status", "200"}})
		resp := host.GetResponseHeaders()
		v, ok := test.GetHeaderValue(resp, "x-redis-count")
		require.True(t, ok)
		require.Equal(t, "7", v)
		require.False(t, test.HasHeader(resp, "x-redis-error"))
		host.CompleteHttp()
	})
}

func TestKeyFromHeader(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(headerConfig)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)

		host.CallOnHttpRequestHeaders([][2]string{
			{":authority", "example.com"}, {":path", "/"}, {":method", "GET"}, {"x-user", "alice"},
		})
		calls := host.GetRedisCalloutAttributes()
		require.Len(t, calls, 1)
		require.Equal(t, "outbound|6379||redis.dns", calls[0].Upstream)
		require.Equal(t, respCommand("incr", "user:alice"), string(calls[0].Query))
		host.CallOnRedisCall(0, []byte(":1\r\n"))
		host.CompleteHttp()

		// Without the header the key falls back to :authority.
		host.InitHttp()
		host.CallOnHttpRequestHeaders([][2]string{
			{":authority", "example.com"}, {":path", "/"}, {":method", "GET"},
		})
		calls = host.GetRedisCalloutAttributes()
		require.Len(t, calls, 1)
		require.Equal(t, respCommand("incr", "user:example.com"), string(calls[0].Query))
		host.CallOnRedisCall(0, []byte(":1\r\n"))
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
		{"error reply", 0, "-ERR wrong kind of value\r\n", "ERR wrong kind of value"},
		{"network error", 1, "", "cannot connect to redis cluster"},
		{"not an integer", 0, "+OK\r\n", `unexpected reply type "+": OK`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			test.RunTest(t, func(t *testing.T) {
				host, status := test.NewTestHost(baseConfig)
				defer host.Reset()
				require.Equal(t, types.OnPluginStartStatusOK, status)

				action := host.CallOnHttpRequestHeaders([][2]string{
					{":authority", "example.com"}, {":path", "/"}, {":method", "GET"},
				})
				require.Equal(t, types.HeaderStopAllIterationAndWatermark, action)
				host.CallOnRedisCall(tc.status, []byte(tc.reply))
				require.Equal(t, types.ActionContinue, host.GetHttpStreamAction())

				host.CallOnHttpResponseHeaders([][2]string{{":status", "200"}})
				resp := host.GetResponseHeaders()
				v, ok := test.GetHeaderValue(resp, "x-redis-error")
				require.True(t, ok)
				require.Equal(t, tc.want, v)
				require.False(t, test.HasHeader(resp, "x-redis-count"))
				host.CompleteHttp()
			})
		})
	}
}
