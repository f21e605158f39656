// Package wasmgate gives wasmgate's Extism plugins written in Go (on
// github.com/extism/go-pdk v1.1.3, standard Go, GOOS=wasip1) PostgreSQL and
// Redis through the host.
//
// A wasmgate plugin never opens a database connection itself: the host owns
// pooled connections to the services the operator configured and granted to
// the plugin (by name), and offers them through the Extism import module
// wasmgate:host/services (functions redis, pg_query and pg_execute, each
// taking and returning a handle to JSON; docs/services.md is the contract).
// This package wraps that JSON:
//
//   - PgQuery runs a parameterised statement that returns rows (*Rows),
//     PgExecute one run for its effect (rows affected). Values are never
//     spliced into SQL: $1, $2, ... in the SQL, the values as params.
//   - Redis sends any command and returns its reply (RedisValue); RedisGet,
//     RedisSet, RedisIncr and RedisExpire are the common ones, typed.
//   - Every failure is an *Error: Kind (not_granted, bad_request,
//     unavailable, timeout, redis, query, or encode/decode/no_such_column
//     from this package), Message, and Code (SQLSTATE, for query errors).
//   - RawCall sends request JSON as is and returns the answer JSON.
//
// For example:
//
//	rows, err := wasmgate.PgQuery("orders", "select id, total from orders where customer = $1", customer)
//	if err != nil { ... }
//	out, _ := rows.JSON() // [{"id":1,"total":"12.50"}, ...]
//
// Built for GOOS=wasip1 the calls go to the host. Built natively (go test of
// a plugin's own logic) they go to a function installed with SetTestHost, or
// fail with unavailable when there is none.
package wasmgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The import functions of wasmgate:host/services, for RawCall.
const (
	FuncRedis     = "redis"
	FuncPgQuery   = "pg_query"
	FuncPgExecute = "pg_execute"
)

// Error kinds. The first six come from the host (docs/services.md), the last
// three from this package.
const (
	// No service of that name is granted to the plugin, or it is of the
	// other type (a Redis service used for SQL, or the reverse).
	KindNotGranted = "not_granted"
	// The request is malformed, a parameter cannot be converted to the type
	// the statement expects (the message names it, $2), or a column's type
	// has no JSON mapping (cast it in SQL: col::text).
	KindBadRequest = "bad_request"
	// No connection could be had: the server is down or refusing,
	// credentials were refused, or no pooled connection came free in time.
	KindUnavailable = "unavailable"
	// The command or query did not finish within the service's timeout_ms.
	KindTimeout = "timeout"
	// Redis answered with an error reply (Message is its text).
	KindRedis = "redis"
	// PostgreSQL refused the statement; Code is its SQLSTATE.
	KindQuery = "query"
	// (This package.) A parameter or argument has a type that has no JSON
	// form in the contract, or the request could not be built.
	KindEncode = "encode"
	// (This package.) An answer, or a value in it, is not what was asked
	// for: Scan into a type the value does not convert to, or an answer that
	// is not the documented JSON.
	KindDecode = "decode"
	// (This package.) Get or Value named a column the result does not have.
	KindNoSuchColumn = "no_such_column"
)

// Error is why an operation failed, as the host reports it
// ({"kind", "message", "code"?}) or as this package found it.
type Error struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Code is PostgreSQL's SQLSTATE for query errors (23505 unique
	// violation, 42P01 undefined table, ...), else empty.
	Code string `json:"code,omitempty"`
}

func (e *Error) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%s: %s (SQLSTATE %s)", e.Kind, e.Message, e.Code)
	}
	return e.Kind + ": " + e.Message
}

// IsKind reports whether err is (or wraps) an *Error of the given kind.
func IsKind(err error, kind string) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == kind
}

func newError(kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// RawCall sends request (JSON text, not checked here) to one of the import
// functions (FuncRedis, FuncPgQuery, FuncPgExecute) and returns the host's
// answer: the result, or {"error": {...}} for a failed operation.
func RawCall(function string, request []byte) []byte {
	switch function {
	case FuncRedis, FuncPgQuery, FuncPgExecute:
		return hostCall(function, request)
	}
	return errorAnswer(KindBadRequest, "no function "+function+" in wasmgate:host/services")
}

// errorAnswer is an answer with error, as the host would write it.
func errorAnswer(kind, message string) []byte {
	answer, _ := json.Marshal(map[string]*Error{"error": {Kind: kind, Message: message}})
	return answer
}

// call sends a request built from v and returns the answer, or the error it
// holds.
func call(function string, v any) ([]byte, error) {
	request, err := json.Marshal(v)
	if err != nil {
		return nil, newError(KindEncode, "cannot encode the %s request: %v", function, err)
	}
	return parseAnswer(function, RawCall(function, request))
}

// parseAnswer checks that answer is a JSON object and turns {"error": ...}
// into an *Error.
func parseAnswer(function string, answer []byte) ([]byte, error) {
	var envelope struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(answer, &envelope); err != nil {
		return nil, newError(KindDecode, "the host's %s answer is not a JSON object: %v", function, err)
	}
	if len(envelope.Error) == 0 || bytes.Equal(envelope.Error, []byte("null")) {
		return answer, nil
	}
	var e Error
	if err := json.Unmarshal(envelope.Error, &e); err != nil || e.Kind == "" {
		return nil, newError(KindDecode, "the host answered with an error this package cannot read: %s", envelope.Error)
	}
	return nil, &e
}

// decodeNumbers unmarshals data into v keeping numbers exact (json.Number).
func decodeNumbers(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}
