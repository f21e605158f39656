// rules_counter: a Higress (wasm-go) filter configured per route, domain or
// service through the framework's `_rules_` list.
//
// The global configuration (every key but `_rules_`) holds the Redis
// settings, a `tag` and a `key_prefix`; each rule may override `tag` and
// `key_prefix` (and may bring its own `redis`). The framework picks the first
// rule whose matcher fits the request (`_match_route_` and
// `_match_route_prefix_` against property route_name, `_match_domain_`
// against `:authority`, `_match_service_` against property cluster_name),
// else the global configuration, else it skips the filter for that request.
//
// When the filter applies, it INCRs <key_prefix><:authority> in Redis,
// holding the request until the reply, and the response carries
// `x-rule-tag: <tag>` and `x-rule-count: <n>` (or `x-redis-error: <why>`;
// the request goes on either way).
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
	headerTag   = "x-rule-tag"
	headerCount = "x-rule-count"
	headerError = "x-redis-error"

	ctxCount = "rules_counter.count"
	ctxError = "rules_counter.error"

	defaultGlobalTag = "global"
	defaultRuleTag   = "rule"
	defaultKeyPrefix = "rules:"
)

func main() {}

func init() {
	wrapper.SetCtx(
		"rules-counter",
		wrapper.ParseOverrideConfig(parseGlobal, parseRule),
		wrapper.ProcessRequestHeaders(onRequestHeaders),
		wrapper.ProcessResponseHeaders(onResponseHeaders),
	)
}

type Config struct {
	tag       string
	keyPrefix string
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
	if !r.IsObject() {
		return s, errors.New("`redis` must be an object")
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

// applyRedis sets up the client when the JSON has a `redis` block.
func applyRedis(json gjson.Result, cfg *Config) error {
	r := json.Get("redis")
	if !r.Exists() {
		return nil
	}
	settings, err := readRedisSettings(r)
	if err != nil {
		return err
	}
	cfg.client, cfg.cluster, err = settings.connect()
	if err != nil {
		return fmt.Errorf("redis init: %w", err)
	}
	return nil
}

// parseGlobal parses the whole configuration object (the framework calls it
// only when there is a key besides `_rules_`). If it fails while `_rules_`
// is present, the framework keeps the rules and drops the global config: then
// unmatched requests skip the filter.
func parseGlobal(json gjson.Result, cfg *Config) error {
	cfg.tag = defaultGlobalTag
	if v := json.Get("tag"); v.Exists() {
		cfg.tag = v.String()
	}
	cfg.keyPrefix = defaultKeyPrefix
	if v := json.Get("key_prefix"); v.Exists() {
		cfg.keyPrefix = v.String()
	}
	if !json.Get("redis").Exists() {
		err := errors.New("the global configuration needs a `redis` block")
		log.Warnf("rules_counter: %v (without one, only rules that bring their own apply)", err)
		return err
	}
	if err := applyRedis(json, cfg); err != nil {
		log.Warnf("rules_counter: global configuration: %v", err)
		return err
	}
	log.Infof("rules_counter: global: tag %q, key %s<:authority>, cluster %s", cfg.tag, cfg.keyPrefix, cfg.cluster)
	return nil
}

// parseRule parses one element of `_rules_` (its `_match_*` keys included)
// on top of the parsed global configuration, or of a zero Config when there
// is none.
func parseRule(json gjson.Result, global Config, cfg *Config) error {
	*cfg = global
	if cfg.keyPrefix == "" && global.client == nil {
		cfg.keyPrefix = defaultKeyPrefix
	}
	if cfg.tag == "" && global.client == nil {
		cfg.tag = defaultRuleTag
	}
	if v := json.Get("tag"); v.Exists() {
		cfg.tag = v.String()
	}
	if v := json.Get("key_prefix"); v.Exists() {
		cfg.keyPrefix = v.String()
	}
	if err := applyRedis(json, cfg); err != nil {
		return fmt.Errorf("rule %s: %w", json.Raw, err)
	}
	if cfg.client == nil {
		return fmt.Errorf("rule %s: no `redis` block, neither in the rule nor in a global configuration", json.Raw)
	}
	log.Infof("rules_counter: rule: tag %q, key %s<:authority>, cluster %s", cfg.tag, cfg.keyPrefix, cfg.cluster)
	return nil
}

func onRequestHeaders(ctx wrapper.HttpContext, cfg Config) types.Action {
	key := cfg.keyPrefix + ctx.Host()
	err := cfg.client.Incr(key, func(reply resp.Value) {
		if n, err := integerReply(reply); err != nil {
			log.Warnf("rules_counter: INCR %s: %v", key, err)
			ctx.SetContext(ctxError, err.Error())
		} else {
			ctx.SetContext(ctxCount, n)
		}
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			log.Errorf("rules_counter: resume request: %v", err)
		}
	})
	if err != nil {
		log.Warnf("rules_counter: cannot send INCR %s to %s: %v", key, cfg.cluster, err)
		ctx.SetContext(ctxError, "dispatch failed: "+err.Error())
		return types.ActionContinue
	}
	return types.HeaderStopAllIterationAndWatermark
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

// onResponseHeaders runs only for requests the filter applied to (the
// framework skips it for the others).
func onResponseHeaders(ctx wrapper.HttpContext, cfg Config) types.Action {
	setResponseHeader(headerTag, cfg.tag)
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
		log.Warnf("rules_counter: set %s: %v", name, err)
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
