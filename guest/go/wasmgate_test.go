//go:build !wasip1

package wasmgate

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// host installs a stand-in that records the last request and answers with
// answer, and removes it when the test ends.
func host(t *testing.T, answer string) *map[string]any {
	t.Helper()
	var last map[string]any
	SetTestHost(func(function string, request []byte) []byte {
		last = map[string]any{}
		if err := json.Unmarshal(request, &last); err != nil {
			t.Fatalf("request is not JSON: %s", request)
		}
		last["_function"] = function
		return []byte(answer)
	})
	t.Cleanup(func() { SetTestHost(nil) })
	return &last
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestParamsMapAsTheContractSays(t *testing.T) {
	request, err := sqlRequest("orders", "select $1", []any{
		"c-42", 7, int64(9007199254740993), uint32(4000000000), 1.5, float32(2.5),
		math.NaN(), math.Inf(1), math.Inf(-1), true, nil, []byte{0, 1, 255}, []byte(nil),
		map[string]any{"a": []int{1, 2}}, []int32{1, 2}, json.RawMessage(`{"k":[true]}`),
		time.Date(2026, 11, 24, 10, 0, 0, 123456000, time.UTC),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"service":"orders","sql":"select $1","params":["c-42",7,9007199254740993,4000000000,1.5,2.5,` +
		`"NaN","Infinity","-Infinity",true,null,{"base64":"AAH/"},null,{"a":[1,2]},[1,2],{"k":[true]},` +
		`"2026-11-24T10:00:00.123456Z"]}`
	if got := jsonOf(t, request); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// No parameters: an empty array, never null.
	request, _ = sqlRequest("s", "q", nil)
	if got := jsonOf(t, request); got != `{"service":"s","sql":"q","params":[]}` {
		t.Fatal(got)
	}
	_, err = sqlRequest("s", "q", []any{1, func() {}})
	if !IsKind(err, KindEncode) || !strings.Contains(err.Error(), "parameter $2") {
		t.Fatalf("got %v", err)
	}
	_, err = sqlRequest("s", "q", []any{json.RawMessage(`{`)})
	if !IsKind(err, KindEncode) {
		t.Fatalf("got %v", err)
	}
}

const ordersAnswer = `{"columns":[{"name":"id","type":"int8"},{"name":"total","type":"numeric"},` +
	`{"name":"items","type":"jsonb"},{"name":"note","type":"text"},{"name":"data","type":"bytea"},` +
	`{"name":"created_at","type":"timestamptz"},{"name":"tags","type":"_text"}],` +
	`"rows":[[1,"12.50",[{"sku":"a"}],null,{"base64":"AAH/"},"2026-11-24T10:00:00.123456Z",["x",null]],` +
	`[9007199254740993,"NaN",[],"gift",null,"2026-11-25T00:00:00Z",[]]]}`

func TestPgQuery(t *testing.T) {
	last := host(t, ordersAnswer)
	rows, err := PgQuery("orders", "select ... where customer = $1", "c-1")
	if err != nil {
		t.Fatal(err)
	}
	if (*last)["_function"] != FuncPgQuery || (*last)["service"] != "orders" {
		t.Fatalf("request %v", *last)
	}
	if rows.Len() != 2 || len(rows.Columns) != 7 || rows.Columns[1] != (Column{"total", "numeric"}) {
		t.Fatalf("rows %+v", rows)
	}
	if rows.ColumnIndex("note") != 3 || rows.ColumnIndex("nope") != -1 {
		t.Fatal("ColumnIndex")
	}

	var (
		id      int64
		total   string
		totalF  float64
		items   []map[string]string
		note    *string
		data    []byte
		created time.Time
		tags    []*string
		anyv    any
	)
	if err := rows.Scan(0, &id, &total, &items, &note, &data, &created, &tags); err != nil {
		t.Fatal(err)
	}
	if id != 1 || total != "12.50" || items[0]["sku"] != "a" || note != nil ||
		!reflect.DeepEqual(data, []byte{0, 1, 255}) || created.Nanosecond() != 123456000 ||
		*tags[0] != "x" || tags[1] != nil {
		t.Fatalf("scanned %v %v %v %v %v %v %v", id, total, items, note, data, created, tags)
	}
	if err := rows.Get(0, "total", &totalF); err != nil || totalF != 12.5 {
		t.Fatalf("numeric as float64: %v %v", totalF, err)
	}
	if err := rows.Scan(1, &id, nil, nil, &note, nil, nil, &anyv); err != nil {
		t.Fatal(err)
	}
	if id != 9007199254740993 || *note != "gift" || !reflect.DeepEqual(anyv, []any{}) {
		t.Fatalf("row 1: %v %v %v", id, *note, anyv)
	}
	if err := rows.Get(1, "id", &anyv); err != nil || anyv != json.Number("9007199254740993") {
		t.Fatalf("exact numbers: %#v %v", anyv, err)
	}
	// Errors.
	if err := rows.Get(0, "nope", &id); !IsKind(err, KindNoSuchColumn) ||
		!strings.Contains(err.Error(), `no column "nope" (columns: id, total, items`) {
		t.Fatalf("got %v", err)
	}
	if err := rows.Get(5, "id", &id); !IsKind(err, KindNoSuchColumn) {
		t.Fatalf("got %v", err)
	}
	if err := rows.Get(1, "total", &totalF); !IsKind(err, KindDecode) {
		t.Fatalf("NaN numeric into float64: %v", err)
	}
	if err := rows.Get(1, "note", &id); !IsKind(err, KindDecode) ||
		!strings.Contains(err.Error(), `column "note" (text): cannot read "gift" into *int64`) {
		t.Fatalf("got %v", err)
	}
	if err := rows.Scan(0, &id); !IsKind(err, KindDecode) {
		t.Fatalf("got %v", err)
	}

	v, ok := rows.Value(0, "items")
	if !ok || jsonOf(t, v) != `[{"sku":"a"}]` {
		t.Fatalf("Value %v", v)
	}
	if _, ok := rows.Value(0, "nope"); ok {
		t.Fatal("Value of a missing column")
	}
	if m := rows.Map(1); m["note"] != "gift" || m["data"] != nil {
		t.Fatalf("Map %v", m)
	}
	if rows.Map(2) != nil {
		t.Fatal("Map past the end")
	}
	out, err := rows.JSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"created_at":"2026-11-24T10:00:00.123456Z","data":{"base64":"AAH/"},"id":1,"items":[{"sku":"a"}],"note":null,"tags":["x",null],"total":"12.50"},` +
		`{"created_at":"2026-11-25T00:00:00Z","data":null,"id":9007199254740993,"items":[],"note":"gift","tags":[],"total":"NaN"}]`
	if string(out) != want {
		t.Fatalf("JSON\n got %s\nwant %s", out, want)
	}
	type order struct {
		ID    int64   `json:"id"`
		Total string  `json:"total"`
		Note  *string `json:"note"`
	}
	var orders []order
	if err := rows.Decode(&orders); err != nil || len(orders) != 2 || orders[0].Total != "12.50" || *orders[1].Note != "gift" {
		t.Fatalf("Decode %v %v", orders, err)
	}
}

func TestEmptyRowsAreAnEmptyArray(t *testing.T) {
	host(t, `{"columns":[{"name":"id","type":"int8"}],"rows":[]}`)
	rows, err := PgQuery("orders", "select id from orders where false")
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := rows.JSON(); string(out) != "[]" || rows.Len() != 0 {
		t.Fatalf("got %s", out)
	}
}

func TestPgExecuteAndErrors(t *testing.T) {
	last := host(t, `{"rows_affected":3}`)
	n, err := PgExecute("orders", "delete from orders where customer = $1", "c-1")
	if err != nil || n != 3 || (*last)["_function"] != FuncPgExecute {
		t.Fatalf("got %v %v %v", n, err, *last)
	}

	host(t, `{"error":{"kind":"query","message":"duplicate key value violates unique constraint","code":"23505"}}`)
	_, err = PgExecute("orders", "insert ...")
	var e *Error
	if !IsKind(err, KindQuery) || !asError(err, &e) || e.Code != "23505" ||
		err.Error() != "query: duplicate key value violates unique constraint (SQLSTATE 23505)" {
		t.Fatalf("got %v", err)
	}
	host(t, `{"error":{"kind":"not_granted","message":"no service db is granted"}}`)
	if _, err := PgQuery("db", "select 1"); !IsKind(err, KindNotGranted) || err.Error() != "not_granted: no service db is granted" {
		t.Fatalf("got %v", err)
	}
	host(t, `not json`)
	if _, err := PgQuery("db", "select 1"); !IsKind(err, KindDecode) {
		t.Fatalf("got %v", err)
	}
	host(t, `{"rows_affected":1}`)
	if _, err := PgQuery("db", "select 1"); !IsKind(err, KindDecode) {
		t.Fatalf("got %v", err)
	}
	host(t, `{"error":"boom"}`)
	if _, err := PgExecute("db", "select 1"); !IsKind(err, KindDecode) || !strings.Contains(err.Error(), `"boom"`) {
		t.Fatalf("got %v", err)
	}
	SetTestHost(nil)
	if _, err := Redis("cache", "PING"); !IsKind(err, KindUnavailable) {
		t.Fatalf("without a host: %v", err)
	}
}

func asError(err error, e **Error) bool {
	var ok bool
	*e, ok = err.(*Error)
	return ok
}

func TestRedisArgsAndReplies(t *testing.T) {
	last := host(t, `{"reply":[null,3,"OK",{"base64":"/wA="},[1,[2]],{"error":"ERR no"},1.5,true]}`)
	reply, err := Redis("cache", "SET", "k", []byte{0xff, 0}, 42, int64(-1), uint8(7), 1.5, math.Inf(-1), json.Number("12"))
	if err != nil {
		t.Fatal(err)
	}
	if got := jsonOf(t, (*last)["command"]); got != `["SET","k",{"base64":"/wA="},42,-1,7,1.5,"-inf",12]` {
		t.Fatalf("command %s", got)
	}
	want := RedisValue{Kind: RedisArray, Array: []RedisValue{
		{Kind: RedisNil},
		{Kind: RedisInt, Int: 3},
		{Kind: RedisText, Text: "OK"},
		{Kind: RedisBytes, Bytes: []byte{0xff, 0}},
		{Kind: RedisArray, Array: []RedisValue{{Kind: RedisInt, Int: 1}, {Kind: RedisArray, Array: []RedisValue{{Kind: RedisInt, Int: 2}}}}},
		{Kind: RedisError, Err: "ERR no"},
		{Kind: RedisText, Text: "1.5"},
		{Kind: RedisInt, Int: 1},
	}}
	if !reflect.DeepEqual(reply, want) {
		t.Fatalf("reply %+v", reply)
	}
	if reply.String() != `[null,3,"OK",{"base64":"/wA="},[1,[2]],{"error":"ERR no"},"1.5",1]` {
		t.Fatalf("String %s", reply)
	}
	if _, err := Redis("cache", "SET", "k", true); !IsKind(err, KindEncode) || !strings.Contains(err.Error(), "argument 2") {
		t.Fatalf("got %v", err)
	}
	host(t, `{"reply":{"x":1}}`)
	if _, err := Redis("cache", "GET", "k"); !IsKind(err, KindDecode) {
		t.Fatalf("got %v", err)
	}
	host(t, `{"nope":1}`)
	if _, err := Redis("cache", "GET", "k"); !IsKind(err, KindDecode) {
		t.Fatalf("got %v", err)
	}
	host(t, `{"error":{"kind":"redis","message":"WRONGTYPE Operation against a key holding the wrong kind of value"}}`)
	if _, err := Redis("cache", "LPUSH", "k", "x"); !IsKind(err, KindRedis) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("got %v", err)
	}
}

func TestRedisHelpers(t *testing.T) {
	store := map[string]any{}
	SetTestHost(func(function string, request []byte) []byte {
		var r struct {
			Service string `json:"service"`
			Command []any  `json:"command"`
		}
		if function != FuncRedis || json.Unmarshal(request, &r) != nil || r.Service != "cache" {
			t.Fatalf("request %s %s", function, request)
		}
		key := r.Command[1].(string)
		var reply any
		switch r.Command[0] {
		case "GET":
			reply = store[key]
		case "SET":
			store[key] = r.Command[2]
			reply = "OK"
		case "INCR":
			n := int64(0)
			if s, ok := store[key].(string); ok {
				json.Unmarshal([]byte(s), &n)
			}
			n++
			store[key] = jsonOf(t, n)
			reply = n
		case "EXPIRE":
			_, ok := store[key]
			reply = map[bool]int{true: 1, false: 0}[ok]
		}
		return []byte(jsonOf(t, map[string]any{"reply": reply}))
	})
	t.Cleanup(func() { SetTestHost(nil) })

	if v, err := RedisGet("cache", "a"); err != nil || !v.IsNil() {
		t.Fatalf("got %v %v", v, err)
	}
	if err := RedisSet("cache", "a", "hello"); err != nil {
		t.Fatal(err)
	}
	if v, _ := RedisGet("cache", "a"); func() bool { s, ok := v.Str(); return !ok || s != "hello" }() {
		t.Fatalf("got %v", v)
	}
	if err := RedisSet("cache", "bin", []byte{0xff}); err != nil {
		t.Fatal(err)
	}
	if v, _ := RedisGet("cache", "bin"); v.Kind != RedisBytes || v.Bytes[0] != 0xff {
		t.Fatalf("got %v", v)
	}
	for want := int64(1); want <= 2; want++ {
		if n, err := RedisIncr("cache", "n"); err != nil || n != want {
			t.Fatalf("got %v %v", n, err)
		}
	}
	if v, _ := RedisGet("cache", "n"); func() bool { n, ok := v.Int64(); return !ok || n != 2 }() {
		t.Fatalf("counter read back: %v", v)
	}
	if ok, err := RedisExpire("cache", "n", 60); err != nil || !ok {
		t.Fatalf("got %v %v", ok, err)
	}
	if ok, err := RedisExpire("cache", "none", 60); err != nil || ok {
		t.Fatalf("got %v %v", ok, err)
	}
	if _, ok := (RedisValue{Kind: RedisText, Text: "x"}).Int64(); ok {
		t.Fatal("Int64 of text")
	}
	if b, ok := (RedisValue{Kind: RedisText, Text: "x"}).AsBytes(); !ok || string(b) != "x" {
		t.Fatal("AsBytes of text")
	}
}

func TestRawCall(t *testing.T) {
	host(t, `{"reply":"PONG"}`)
	if got := string(RawCall(FuncRedis, []byte(`{"service":"cache","command":["PING"]}`))); got != `{"reply":"PONG"}` {
		t.Fatal(got)
	}
	var answer struct{ Error Error }
	if json.Unmarshal(RawCall("nope", nil), &answer); answer.Error.Kind != KindBadRequest {
		t.Fatalf("got %+v", answer)
	}
}
