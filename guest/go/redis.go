package wasmgate

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Redis sends one command (args[0] is its name) to the Redis service named
// service and returns the reply. Arguments are strings (sent as their
// UTF-8 bytes), []byte (binary, as {"base64": ...}), integers and floats
// (sent in decimal; the infinities as inf and -inf) or json.Number; anything
// else is an encode error. An error reply is an *Error of kind redis whose
// Message is Redis's text (WRONGTYPE ...).
func Redis(service string, args ...any) (RedisValue, error) {
	request := struct {
		Service string            `json:"service"`
		Command []json.RawMessage `json:"command"`
	}{Service: service, Command: make([]json.RawMessage, 0, len(args))}
	for i, a := range args {
		encoded, err := encodeArg(a)
		if err != nil {
			return RedisValue{}, newError(KindEncode, "argument %d: %v", i, err)
		}
		request.Command = append(request.Command, encoded)
	}
	answer, err := call(FuncRedis, request)
	if err != nil {
		return RedisValue{}, err
	}
	var result map[string]json.RawMessage
	if err := json.Unmarshal(answer, &result); err != nil {
		return RedisValue{}, newError(KindDecode, "the host's redis answer is not {reply}: %s", answer)
	}
	raw, ok := result["reply"]
	if !ok {
		return RedisValue{}, newError(KindDecode, "the host's redis answer has no reply: %s", answer)
	}
	var reply any
	if err := decodeNumbers(raw, &reply); err != nil {
		return RedisValue{}, newError(KindDecode, "the host's redis reply is not JSON: %v", err)
	}
	return redisValueFromJSON(reply)
}

// RedisGet is GET key: the value (RedisText, RedisBytes when it is not
// UTF-8) or RedisNil when the key does not exist.
func RedisGet(service, key string) (RedisValue, error) {
	return Redis(service, "GET", key)
}

// RedisSet is SET key value (value as a Redis argument).
func RedisSet(service, key string, value any) error {
	_, err := Redis(service, "SET", key, value)
	return err
}

// RedisIncr is INCR key: the value after the increment.
func RedisIncr(service, key string) (int64, error) {
	reply, err := Redis(service, "INCR", key)
	if err != nil {
		return 0, err
	}
	n, ok := reply.Int64()
	if !ok {
		return 0, newError(KindDecode, "INCR replied %v, not an integer", reply)
	}
	return n, nil
}

// RedisExpire is EXPIRE key seconds: whether the timeout was set (false when
// the key does not exist).
func RedisExpire(service, key string, seconds int64) (bool, error) {
	reply, err := Redis(service, "EXPIRE", key, seconds)
	if err != nil {
		return false, err
	}
	n, ok := reply.Int64()
	if !ok {
		return false, newError(KindDecode, "EXPIRE replied %v, not an integer", reply)
	}
	return n == 1, nil
}

func encodeArg(a any) (json.RawMessage, error) {
	switch x := a.(type) {
	case string, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, json.Number:
		return json.Marshal(x)
	case []byte:
		return base64JSON(x), nil
	case float32:
		return floatArg(float64(x))
	case float64:
		return floatArg(x)
	}
	return nil, fmt.Errorf("a Redis argument is a string, []byte, an integer or a float, not %T", a)
}

func floatArg(x float64) (json.RawMessage, error) {
	switch {
	case math.IsNaN(x):
		return json.RawMessage(`"nan"`), nil
	case math.IsInf(x, 1):
		return json.RawMessage(`"inf"`), nil
	case math.IsInf(x, -1):
		return json.RawMessage(`"-inf"`), nil
	}
	return json.Marshal(x)
}

// RedisKind says which field of a RedisValue holds the reply.
type RedisKind int

const (
	// RedisNil is no value (GET of a missing key).
	RedisNil RedisKind = iota
	// RedisInt is an integer reply (and a RESP3 boolean, as 1 or 0), in Int.
	RedisInt
	// RedisText is a simple or bulk string that is UTF-8 (and a RESP3
	// double, in decimal), in Text.
	RedisText
	// RedisBytes is a bulk string that is not UTF-8, in Bytes.
	RedisBytes
	// RedisArray is an array reply, in Array.
	RedisArray
	// RedisError is an error inside an array reply (from EXEC), its text in
	// Err. An error as the whole reply is an *Error of kind redis instead.
	RedisError
)

func (k RedisKind) String() string {
	switch k {
	case RedisNil:
		return "nil"
	case RedisInt:
		return "int"
	case RedisText:
		return "text"
	case RedisBytes:
		return "bytes"
	case RedisArray:
		return "array"
	case RedisError:
		return "error"
	}
	return fmt.Sprintf("RedisKind(%d)", int(k))
}

// RedisValue is a Redis reply; Kind says which field holds it.
type RedisValue struct {
	Kind  RedisKind
	Int   int64
	Text  string
	Bytes []byte
	Array []RedisValue
	Err   string
}

// IsNil reports whether the reply is nil.
func (v RedisValue) IsNil() bool { return v.Kind == RedisNil }

// Int64 is an integer reply, or a string holding a decimal integer (what GET
// gives for a counter).
func (v RedisValue) Int64() (int64, bool) {
	switch v.Kind {
	case RedisInt:
		return v.Int, true
	case RedisText:
		if n, err := strconv.ParseInt(v.Text, 10, 64); err == nil {
			return n, true
		}
	}
	return 0, false
}

// Str is a string reply's text.
func (v RedisValue) Str() (string, bool) {
	if v.Kind == RedisText {
		return v.Text, true
	}
	return "", false
}

// AsBytes is a string reply's bytes, UTF-8 or not.
func (v RedisValue) AsBytes() ([]byte, bool) {
	switch v.Kind {
	case RedisText:
		return []byte(v.Text), true
	case RedisBytes:
		return v.Bytes, true
	}
	return nil, false
}

// JSON is the reply in the contract's JSON form.
func (v RedisValue) JSON() any {
	switch v.Kind {
	case RedisInt:
		return v.Int
	case RedisText:
		return v.Text
	case RedisBytes:
		return map[string]string{"base64": base64.StdEncoding.EncodeToString(v.Bytes)}
	case RedisArray:
		items := make([]any, len(v.Array))
		for i, item := range v.Array {
			items[i] = item.JSON()
		}
		return items
	case RedisError:
		return map[string]string{"error": v.Err}
	}
	return nil
}

func (v RedisValue) String() string {
	out, _ := json.Marshal(v.JSON())
	return string(out)
}

// redisValueFromJSON reads a reply decoded with UseNumber.
func redisValueFromJSON(reply any) (RedisValue, error) {
	switch x := reply.(type) {
	case nil:
		return RedisValue{Kind: RedisNil}, nil
	case bool:
		if x {
			return RedisValue{Kind: RedisInt, Int: 1}, nil
		}
		return RedisValue{Kind: RedisInt}, nil
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return RedisValue{Kind: RedisInt, Int: n}, nil
		}
		return RedisValue{Kind: RedisText, Text: x.String()}, nil
	case string:
		return RedisValue{Kind: RedisText, Text: x}, nil
	case []any:
		items := make([]RedisValue, len(x))
		for i, item := range x {
			v, err := redisValueFromJSON(item)
			if err != nil {
				return RedisValue{}, err
			}
			items[i] = v
		}
		return RedisValue{Kind: RedisArray, Array: items}, nil
	case map[string]any:
		if text, ok := base64Value(x); ok {
			data, err := base64.StdEncoding.DecodeString(text)
			if err != nil {
				return RedisValue{}, newError(KindDecode, "invalid base64 in a Redis reply: %v", err)
			}
			return RedisValue{Kind: RedisBytes, Bytes: data}, nil
		}
		if text, ok := x["error"].(string); ok && len(x) == 1 {
			return RedisValue{Kind: RedisError, Err: text}, nil
		}
	}
	out, _ := json.Marshal(reply)
	return RedisValue{}, newError(KindDecode, "a Redis reply the contract does not define: %s", out)
}
