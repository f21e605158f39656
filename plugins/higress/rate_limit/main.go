// rate_limit: a Higress (wasm-go) filter enforcing a fixed-window request
// limit shared by every gateway node that uses the same Redis.
//
// Per request it runs one EVAL of a small Lua script on key
// `rl:<key>:<window start>` (INCR, and EXPIRE when the key is new), holding
// the request until the reply. A count above `limit` is answered locally with
// 429 and `x-ratelimit-limit`; otherwise the request goes on and the response
// carries `x-ratelimit-limit`, `x-ratelimit-remaining` and
// `x-ratelimit-reset`. If Redis cannot be asked or answers with an error the
// request goes on (fail open) and the response carries `x-ratelimit-error`.
//
// <key> is the value of request header `key_header` (`anonymous` when the
// request lacks it), or the request's `:authority` when no `key_header` is
// configured. <window start> is the Unix time (seconds) at which the current
// window began: a multiple of `window_seconds`.
package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/higress-group/wasm-go/pkg/log"
	"github.com/higress-group/wasm-go/pkg/wrapper"
	"github.com/tidwall/gjson"
	"github.com/tidwall/resp"
)

const (
	headerLimit     = "x-ratelimit-limit"
	headerRemaining = "x-ratelimit-remaining"
	headerReset     = "x-ratelimit-reset"
	headerError     = "x-ratelimit-error"

	ctxRemaining = "rate_limit.remaining"
	ctxReset     = "rate_limit.reset"
	ctxError     = "rate_limit.error"
	ctxRejected  = "rate_limit.rejected"

	anonymousKey  = "anonymous"
	defaultWindow = 60

	// statusDetail names the local reply in Envoy-style access logs.
	statusDetail = "rate_limit.limit_exceeded"
)

// windowScript counts one hit in the window's key and returns the count. The
// key expires when its window is over; the TTL check also repairs a key that
// somehow lost its expiry, so that no window key lives forever.
//
// KEYS[1] = rl:<key>:<window start>, ARGV[1] = window length in seconds.
const windowScript = `local n = redis.call('INCR', KEYS[1])
if n == 1 or redis.call('TTL', KEYS[1]) < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return n`

func main() {}

func init() {
	wrapper.SetCtx(
		"rate-limit",
		wrapper.ParseConfig(parseConfig),
		wrapper.ProcessRequestHeaders(onRequestHeaders),
		wrapper.ProcessResponseHeaders(onResponseHeaders),
	)
}

type Config struct {
	limit     int64
	window    int64
	keyHeader string
	cluster   string
	client    wrapper.RedisClient
}

type redisSettings struct {
	serviceName string
	servicePort int64
	username    string
	password    string
	timeoutMs   int64
	database    int
}

func readRedisSettings(r gjson.Result) (redisSettings, error) {
	var s redisSettings
	if !r.Exists() || !r.IsObject() {
		return s, errors.New("`redis` (an object) is required")
	}
	s.serviceName = strings.TrimSpace(r.Get("service_name").String())
	if s.serviceName == "" {
		return s, errors.New("redis.service_name is required")
	}
	s.servicePort = r.Get("service_port").Int()
	if s.servicePort == 0 {
		// Higress gives static services the logical port 80.
		if strings.HasSuffix(s.serviceName, ".static") {
			s.servicePort = 80
		} else {
			s.servicePort = 6379
		}
	}
	if s.servicePort < 0 || s.servicePort > 65535 {
		return s, fmt.Errorf("redis.service_port %d is out of range", s.servicePort)
	}
	s.username = r.Get("username").String()
	s.password = r.Get("password").String()
	s.timeoutMs = r.Get("timeout").Int()
	if s.timeoutMs <= 0 {
		s.timeoutMs = 1000
	}
	s.database = int(r.Get("database").Int())
	if s.database < 0 {
		return s, fmt.Errorf("redis.database %d is negative", s.database)
	}
	return s, nil
}

func (s redisSettings) connect() (wrapper.RedisClient, string, error) {
	cluster := wrapper.FQDNCluster{FQDN: s.serviceName, Port: s.servicePort}
	client := wrapper.NewRedisClusterClient(cluster)
	err := client.Init(s.username, s.password, s.timeoutMs, wrapper.WithDataBase(s.database))
	return client, cluster.ClusterName(), err
}

func parseConfig(json gjson.Result, cfg *Config) error {
	settings, err := readRedisSettings(json.Get("redis"))
	if err != nil {
		return err
	}
	limit := json.Get("limit")
	if !limit.Exists() || limit.Type != gjson.Number {
		return errors.New("`limit` (a number of requests per window) is required")
	}
	cfg.limit = limit.Int()
	if cfg.limit < 0 {
		return fmt.Errorf("limit %d is negative", cfg.limit)
	}
	cfg.window = defaultWindow
	if w := json.Get("window_seconds"); w.Exists() {
		cfg.window = w.Int()
		if cfg.window <= 0 {
			return fmt.Errorf("window_seconds must be at least 1, not %s", w.Raw)
		}
	}
	cfg.keyHeader = strings.ToLower(strings.TrimSpace(json.Get("key_header").String()))
	cfg.client, cfg.cluster, err = settings.connect()
	if err != nil {
		return fmt.Errorf("redis init: %w", err)
	}
	by := ":authority"
	if cfg.keyHeader != "" {
		by = "header " + cfg.keyHeader
	}
	log.Infof("rate_limit: %d requests per %d s by %s, cluster %s", cfg.limit, cfg.window, by, cfg.cluster)
	return nil
}

func clientKey(ctx wrapper.HttpContext, cfg Config) string {
	if cfg.keyHeader == "" {
		return ctx.Host()
	}
	if v, err := proxywasm.GetHttpRequestHeader(cfg.keyHeader); err == nil && v != "" {
		return v
	}
	return anonymousKey
}

func onRequestHeaders(ctx wrapper.HttpContext, cfg Config) types.Action {
	now := time.Now().Unix()
	start := now - now%cfg.window
	reset := start + cfg.window - now
	key := fmt.Sprintf("rl:%s:%d", clientKey(ctx, cfg), start)

	err := cfg.client.Eval(windowScript, 1, []interface{}{key}, []interface{}{cfg.window}, func(reply resp.Value) {
		count, err := integerReply(reply)
		if err != nil {
			log.Warnf("rate_limit: EVAL on %s: %v", key, err)
			ctx.SetContext(ctxError, err.Error())
			resume()
			return
		}
		if int64(count) > cfg.limit {
			if reject(cfg, reset) {
				ctx.SetContext(ctxRejected, true)
				return
			}
			ctx.SetContext(ctxError, "cannot send the 429 reply")
			resume()
			return
		}
		ctx.SetContext(ctxRemaining, cfg.limit-int64(count))
		ctx.SetContext(ctxReset, reset)
		resume()
	})
	if err != nil {
		log.Warnf("rate_limit: cannot send EVAL on %s to %s: %v", key, cfg.cluster, err)
		ctx.SetContext(ctxError, "dispatch failed: "+err.Error())
		return types.ActionContinue
	}
	return types.HeaderStopAllIterationAndWatermark
}

// reject answers the held request with 429; it reports whether it could.
func reject(cfg Config, reset int64) bool {
	limit := strconv.FormatInt(cfg.limit, 10)
	headers := [][2]string{
		{"content-type", "text/plain; charset=utf-8"},
		{headerLimit, limit},
		{headerRemaining, "0"},
		{headerReset, strconv.FormatInt(reset, 10)},
		{"retry-after", strconv.FormatInt(reset, 10)},
	}
	body := []byte("Too Many Requests: more than " + limit + " requests in " +
		strconv.FormatInt(cfg.window, 10) + " s\n")
	if err := proxywasm.SendHttpResponseWithDetail(429, statusDetail, headers, body, -1); err != nil {
		log.Errorf("rate_limit: send 429: %v", err)
		return false
	}
	return true
}

func resume() {
	if err := proxywasm.ResumeHttpRequest(); err != nil {
		log.Errorf("rate_limit: resume request: %v", err)
	}
}

func integerReply(reply resp.Value) (int, error) {
	if err := reply.Error(); err != nil {
		return 0, err
	}
	if reply.Type() != resp.Integer {
		return 0, fmt.Errorf("unexpected reply type %q: %s", string(rune(reply.Type())), reply.String())
	}
	return reply.Integer(), nil
}

func onResponseHeaders(ctx wrapper.HttpContext, cfg Config) types.Action {
	if ctx.GetBoolContext(ctxRejected, false) {
		// Our own 429: its headers are already set.
		return types.ActionContinue
	}
	if remaining, ok := ctx.GetContext(ctxRemaining).(int64); ok {
		setResponseHeader(headerLimit, strconv.FormatInt(cfg.limit, 10))
		setResponseHeader(headerRemaining, strconv.FormatInt(remaining, 10))
		if reset, ok := ctx.GetContext(ctxReset).(int64); ok {
			setResponseHeader(headerReset, strconv.FormatInt(reset, 10))
		}
	}
	if msg, ok := ctx.GetContext(ctxError).(string); ok {
		setResponseHeader(headerError, msg)
	}
	return types.ActionContinue
}

func setResponseHeader(name, value string) {
	if err := proxywasm.ReplaceHttpResponseHeader(name, headerValue(value)); err != nil {
		log.Warnf("rate_limit: set %s: %v", name, err)
	}
}

func headerValue(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
