package main

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/higress-group/wasm-go/pkg/test"
	"github.com/stretchr/testify/require"
)

var globalAndRules = json.RawMessage(`{
  "tag": "global",
  "key_prefix": "all:",
  "redis": {"service_name": "redis.static", "service_port": 6379, "timeout": 500, "database": 1},
  "_rules_": [
    {"_match_route_": ["api-route"], "tag": "route-api", "key_prefix": "api:"},
    {"_match_domain_": ["*.example.com", "exact.test"], "tag": "domain"},
    {"_match_service_": ["backend.default.svc.cluster.local:8080"], "tag": "service"},
    {"_match_route_prefix_": ["ai-"], "tag": "prefix", "key_prefix": "ai:"}
  ]
}`)

var rulesOnly = json.RawMessage(`{
  "_rules_": [
    {"_match_route_": ["counted"], "tag": "only", "key_prefix": "only:",
     "redis": {"service_name": "cache.dns"}}
  ]
}`)

func respCommand(args ...string) string {
	out := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		out += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	return out
}

// roundTrip sends one request through the filter, answers its INCR with
// `reply` when it made one, and returns the response headers and the query.
func roundTrip(t *testing.T, host test.TestHost, authority, reply string) ([][2]string, string) {
	t.Helper()
	host.InitHttp()
	action := host.CallOnHttpRequestHeaders([][2]string{
		{":authority", authority}, {":path", "/x"}, {":method", "GET"},
	})
	calls := host.GetRedisCalloutAttributes()
	query := ""
	if len(calls) > 0 {
		require.Len(t, calls, 1)
		require.Equal(t, types.HeaderStopAllIterationAndWatermark, action)
		query = string(calls[0].Query)
		host.CallOnRedisCall(0, []byte(reply))
		require.Equal(t, types.ActionContinue, host.GetHttpStreamAction())
	} else {
		require.Equal(t, types.ActionContinue, action)
	}
	host.CallOnHttpResponseHeaders([][2]string{{":status", "200"}})
	headers := host.GetResponseHeaders()
	host.CompleteHttp()
	return headers, query
}

func requireHeader(t *testing.T, headers [][2]string, name, want string) {
	t.Helper()
	got, ok := test.GetHeaderValue(headers, name)
	require.True(t, ok, "missing %s in %v", name, headers)
	require.Equal(t, want, got, name)
}

func TestRulesPickTagAndPrefix(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(globalAndRules)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)

		for _, tc := range []struct {
			name, route, cluster, authority string
			tag, key                        string
		}{
			{"route", "api-route", "outbound|80||unrelated.static", "plain.test", "route-api", "api:plain.test"},
			{"domain wildcard", "other", "outbound|80||unrelated.static", "www.example.com", "domain", "all:www.example.com"},
			{"domain with port", "other", "outbound|80||unrelated.static", "exact.test:8080", "domain", "all:exact.test:8080"},
			{"service", "other", "outbound|8080||backend.default.svc.cluster.local", "plain.test", "service", "all:plain.test"},
			{"route prefix", "ai-chat", "outbound|80||unrelated.static", "plain.test", "prefix", "ai:plain.test"},
			{"global", "other", "outbound|9090||backend.default.svc.cluster.local", "plain.test", "global", "all:plain.test"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				require.NoError(t, host.SetRouteName(tc.route))
				require.NoError(t, host.SetClusterName(tc.cluster))
				headers, query := roundTrip(t, host, tc.authority, ":3\r\n")
				require.Equal(t, respCommand("incr", tc.key), query)
				requireHeader(t, headers, "x-rule-tag", tc.tag)
				requireHeader(t, headers, "x-rule-count", "3")
				require.False(t, test.HasHeader(headers, "x-redis-error"))
			})
		}
	})
}

func TestRedisClusterAndErrors(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(globalAndRules)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)
		require.NoError(t, host.SetRouteName("api-route"))

		host.InitHttp()
		host.CallOnHttpRequestHeaders([][2]string{{":authority", "a.test"}, {":path", "/"}, {":method", "GET"}})
		calls := host.GetRedisCalloutAttributes()
		require.Len(t, calls, 1)
		// The framework sends calls to the bare cluster; `?db=1` goes only to proxy_redis_init.
		require.Equal(t, "outbound|6379||redis.static", calls[0].Upstream)
		host.CallOnRedisCall(1, nil)
		require.Equal(t, types.ActionContinue, host.GetHttpStreamAction())
		host.CallOnHttpResponseHeaders([][2]string{{":status", "200"}})
		headers := host.GetResponseHeaders()
		requireHeader(t, headers, "x-rule-tag", "route-api")
		requireHeader(t, headers, "x-redis-error", "cannot connect to redis cluster")
		require.False(t, test.HasHeader(headers, "x-rule-count"))
		host.CompleteHttp()
	})
}

func TestNoMatchNoGlobalSkips(t *testing.T) {
	test.RunTest(t, func(t *testing.T) {
		host, status := test.NewTestHost(rulesOnly)
		defer host.Reset()
		require.Equal(t, types.OnPluginStartStatusOK, status)

		require.NoError(t, host.SetRouteName("counted"))
		headers, query := roundTrip(t, host, "a.test", ":1\r\n")
		require.Equal(t, respCommand("incr", "only:a.test"), query)
		requireHeader(t, headers, "x-rule-tag", "only")
		requireHeader(t, headers, "x-rule-count", "1")

		require.NoError(t, host.SetRouteName("elsewhere"))
		headers, query = roundTrip(t, host, "a.test", "")
		require.Empty(t, query)
		require.False(t, test.HasHeader(headers, "x-rule-tag"))
		require.False(t, test.HasHeader(headers, "x-rule-count"))
		require.False(t, test.HasHeader(headers, "x-redis-error"))
	})
}

func TestBadConfigs(t *testing.T) {
	for name, cfg := range map[string]string{
		"rule without any redis":  `{"_rules_": [{"_match_route_": ["r"], "tag": "t"}]}`,
		"global without redis":    `{"tag": "g"}`,
		"rule without matcher":    `{"redis": {"service_name": "redis.static"}, "_rules_": [{"tag": "t"}]}`,
		"redis without a service": `{"redis": {"service_port": 6379}}`,
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
