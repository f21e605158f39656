// redis_counter: a Higress (wasm-go) filter that counts requests in Redis.
//
// Per request it sends INCR <key_prefix><key> through Higress's Redis ABI
// extension (proxy_redis_call), holds the request until the reply arrives
// (proxy_on_redis_call_response, reply read from buffer 9) and resumes it.
// The response then carries `x-redis-count: <n>`, or `x-redis-error: <why>`
// when Redis could not be asked or answered with an error (fail open: the
// request always goes on).
//
// <key> is the value of request header `key_header` when that is configured
// and present, else the request's `:authority` exactly as received.
package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/higress-group/wasm-go/pkg/log"
	"github.com/higress-group/wasm-go/pkg/wrapper"
	"github.com/tidwall/gjson"
	"github.com/tidwall/resp"
)

const (
	headerCount = "x-redis-count"
	headerError = "x-redis-error"

	ctxCount = "redis_counter.count"
	ctxError = "redis_counter.error"
)

func main() {}

func init() {
	wrapper.SetCtx(
		"redis-counter",
		wrapper.ParseConfig(parseConfig),
		wrapper.ProcessRequestHeaders(onRequestHeaders),
		wrapper.ProcessResponseHeaders(onResponseHeaders),
	)
}

type Config struct {
	keyPrefix string
	keyHeader string
	cluster   string
	client    wrapper.RedisClient
}

// redisSettings is the `redis` object of the configuration, in the shape
// Higress's own Redis-backed plugins use.
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

// connect builds the client (cluster `outbound|<port>||<service_name>`) and
// announces it to the host with proxy_redis_init. The framework does not
// fail when the host refuses the init: it retries before every command, so
// such a failure shows up per request as a dispatch error.
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
	cfg.keyPrefix = "count:"
	if v := json.Get("key_prefix"); v.Exists() {
		cfg.keyPrefix = v.String()
	}
	cfg.keyHeader = strings.ToLower(strings.TrimSpace(json.Get("key_header").String()))
	cfg.client, cfg.cluster, err = settings.connect()
	if err != nil {
		return fmt.Errorf("redis init: %w", err)
	}
	log.Infof("redis_counter: cluster %s, key %s<%s>", cfg.cluster, cfg.keyPrefix, keySource(cfg))
	return nil
}

func keySource(cfg *Config) string {
	if cfg.keyHeader != "" {
		return "header " + cfg.keyHeader + ", else :authority"
	}
	return ":authority"
}

func requestKey(ctx wrapper.HttpContext, cfg Config) string {
	if cfg.keyHeader != "" {
		if v, err := proxywasm.GetHttpRequestHeader(cfg.keyHeader); err == nil && v != "" {
			return v
		}
	}
	return ctx.Host()
}

func onRequestHeaders(ctx wrapper.HttpContext, cfg Config) types.Action {
	key := cfg.keyPrefix + requestKey(ctx, cfg)
	err := cfg.client.Incr(key, func(reply resp.Value) {
		if n, err := integerReply(reply); err != nil {
			log.Warnf("redis_counter: INCR %s: %v", key, err)
			ctx.SetContext(ctxError, err.Error())
		} else {
			ctx.SetContext(ctxCount, n)
		}
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			log.Errorf("redis_counter: resume request: %v", err)
		}
	})
	if err != nil {
		log.Warnf("redis_counter: cannot send INCR %s to %s: %v", key, cfg.cluster, err)
		ctx.SetContext(ctxError, "dispatch failed: "+err.Error())
		return types.ActionContinue
	}
	// Hold the request (headers, body and trailers) until the reply.
	return types.HeaderStopAllIterationAndWatermark
}

// integerReply turns a reply into the integer INCR answers, or an error: a
// Redis error reply (`-ERR ...`, or the framework's own "cannot connect to
// redis cluster" when the host reported a network failure) or any other type.
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
	if n, ok := ctx.GetContext(ctxCount).(int); ok {
		setResponseHeader(headerCount, strconv.Itoa(n))
	}
	if msg, ok := ctx.GetContext(ctxError).(string); ok {
		setResponseHeader(headerError, msg)
	}
	return types.ActionContinue
}

func setResponseHeader(name, value string) {
	if err := proxywasm.ReplaceHttpResponseHeader(name, headerValue(value)); err != nil {
		log.Warnf("redis_counter: set %s: %v", name, err)
	}
}

// headerValue keeps a message usable as a header value: one line, printable.
func headerValue(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
