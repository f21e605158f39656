package wasmgate

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strings"
)

// PgQuery runs a statement that returns rows (select, ... returning) on the
// PostgreSQL service named service, with params as $1, $2, ...
//
// Parameters are converted to the type PostgreSQL inferred for each: nil is
// NULL; integers, floats (NaN and the infinities as "NaN", "Infinity",
// "-Infinity"), bools and strings are themselves; []byte is bytea
// ({"base64": ...}); a numeric is best given as a string ("12.50"), time
// types as strings (a time.Time marshals to RFC 3339); slices are array
// parameters; maps, structs and json.RawMessage are JSON (for json/jsonb).
// A parameter that does not fit its type is a bad_request error naming it.
func PgQuery(service, sql string, params ...any) (*Rows, error) {
	request, err := sqlRequest(service, sql, params)
	if err != nil {
		return nil, err
	}
	answer, err := call(FuncPgQuery, request)
	if err != nil {
		return nil, err
	}
	var result struct {
		Columns *[]Column `json:"columns"`
		Rows    [][]any   `json:"rows"`
	}
	if err := decodeNumbers(answer, &result); err != nil || result.Columns == nil {
		return nil, newError(KindDecode, "the host's pg_query answer is not {columns, rows}: %s", answer)
	}
	return &Rows{Columns: *result.Columns, Rows: result.Rows}, nil
}

// PgExecute runs a statement for its effect (insert, update, delete, DDL) and
// returns the number of rows it affected (for a select: returned). Parameters
// are as for PgQuery.
func PgExecute(service, sql string, params ...any) (int64, error) {
	request, err := sqlRequest(service, sql, params)
	if err != nil {
		return 0, err
	}
	answer, err := call(FuncPgExecute, request)
	if err != nil {
		return 0, err
	}
	var result struct {
		RowsAffected *int64 `json:"rows_affected"`
	}
	if err := json.Unmarshal(answer, &result); err != nil || result.RowsAffected == nil {
		return 0, newError(KindDecode, "the host's pg_execute answer has no rows_affected: %s", answer)
	}
	return *result.RowsAffected, nil
}

type sqlRequestJSON struct {
	Service string            `json:"service"`
	SQL     string            `json:"sql"`
	Params  []json.RawMessage `json:"params"`
}

func sqlRequest(service, sql string, params []any) (*sqlRequestJSON, error) {
	request := &sqlRequestJSON{Service: service, SQL: sql, Params: make([]json.RawMessage, 0, len(params))}
	for i, p := range params {
		encoded, err := encodeParam(p)
		if err != nil {
			return nil, newError(KindEncode, "parameter $%d: %v", i+1, err)
		}
		request.Params = append(request.Params, encoded)
	}
	return request, nil
}

func encodeParam(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case []byte:
		if x == nil {
			return json.RawMessage("null"), nil
		}
		return base64JSON(x), nil
	case float64:
		return floatJSON(x), nil
	case float32:
		return floatJSON(float64(x)), nil
	case json.RawMessage:
		if !json.Valid(x) {
			return nil, newError(KindEncode, "json.RawMessage is not valid JSON")
		}
		return x, nil
	}
	return json.Marshal(v)
}

// floatJSON is a float as the contract writes it: a number, or "NaN",
// "Infinity", "-Infinity".
func floatJSON(x float64) json.RawMessage {
	switch {
	case math.IsNaN(x):
		return json.RawMessage(`"NaN"`)
	case math.IsInf(x, 1):
		return json.RawMessage(`"Infinity"`)
	case math.IsInf(x, -1):
		return json.RawMessage(`"-Infinity"`)
	}
	out, _ := json.Marshal(x)
	return out
}

// base64JSON is {"base64": "<data>"}.
func base64JSON(data []byte) json.RawMessage {
	out, _ := json.Marshal(map[string]string{"base64": base64.StdEncoding.EncodeToString(data)})
	return out
}

// base64Value is the text of a {"base64": "..."} object (and nothing else in
// it), decoded from a value read with UseNumber.
func base64Value(v any) (string, bool) {
	object, ok := v.(map[string]any)
	if !ok || len(object) != 1 {
		return "", false
	}
	text, ok := object["base64"].(string)
	return text, ok
}

// Column is a result column: its name and PostgreSQL type name (int8,
// numeric, text, timestamptz, _int4 for int4[], ...).
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Rows is what PgQuery returned: the columns and, per row, the values in
// column order as JSON decoded them, numbers kept exact as json.Number
// (Int64(), Float64(), String()). Per the contract: numeric is an exact
// decimal string ("12.50"), bytea {"base64": ...} (a map), json/jsonb the
// JSON itself, time types strings, arrays []any, NULL nil.
type Rows struct {
	Columns []Column `json:"columns"`
	Rows    [][]any  `json:"rows"`
}

// Len is the number of rows.
func (r *Rows) Len() int { return len(r.Rows) }

// ColumnIndex is the position of the column named name (the first, if
// several are), or -1.
func (r *Rows) ColumnIndex(name string) int {
	for i, c := range r.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// Value is the value of column name in row i, as decoded (see Rows); false
// when there is no such row or column.
func (r *Rows) Value(i int, name string) (any, bool) {
	c := r.ColumnIndex(name)
	if c < 0 || i < 0 || i >= len(r.Rows) || c >= len(r.Rows[i]) {
		return nil, false
	}
	return r.Rows[i][c], true
}

// Map is row i as a map keyed by column name (nil when there is no row i).
func (r *Rows) Map(i int) map[string]any {
	if i < 0 || i >= len(r.Rows) {
		return nil
	}
	row := make(map[string]any, len(r.Columns))
	for c, column := range r.Columns {
		if c < len(r.Rows[i]) {
			row[column.Name] = r.Rows[i][c]
		} else {
			row[column.Name] = nil
		}
	}
	return row
}

// Maps is every row as a map keyed by column name.
func (r *Rows) Maps() []map[string]any {
	rows := make([]map[string]any, len(r.Rows))
	for i := range r.Rows {
		rows[i] = r.Map(i)
	}
	return rows
}

// JSON is every row as a JSON object keyed by column name, in an array
// (what a plugin that just returns the rows outputs; keys sorted, values as
// the host gave them).
func (r *Rows) JSON() ([]byte, error) {
	return json.Marshal(r.Maps())
}

// Decode unmarshals the rows, as JSON gives them, into v: a pointer to a
// slice of structs (fields matched by name or `json` tag) or of maps.
// numeric columns are strings there: give their fields type string, or tag
// them `json:",string"` for a float64, or cast in SQL (total::float8).
func (r *Rows) Decode(v any) error {
	data, err := r.JSON()
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		return newError(KindDecode, "cannot read the rows into %T: %v", v, err)
	}
	return nil
}

// Scan stores the values of row i in dest, one pointer per column in order
// (nil skips a column). See Get for the conversions.
func (r *Rows) Scan(i int, dest ...any) error {
	if i < 0 || i >= len(r.Rows) {
		return newError(KindNoSuchColumn, "no row %d (%d rows)", i, len(r.Rows))
	}
	if len(dest) != len(r.Columns) {
		return newError(KindDecode, "Scan got %d destinations for %d columns", len(dest), len(r.Columns))
	}
	for c, d := range dest {
		if d == nil {
			continue
		}
		var value any
		if c < len(r.Rows[i]) {
			value = r.Rows[i][c]
		}
		if err := convert(r.Columns[c], value, d); err != nil {
			return err
		}
	}
	return nil
}

// Get stores the value of column name in row i in dest, a pointer:
// *int64, *float64, *string, *bool, *[]byte (bytea), *time.Time (time types),
// *any, slices (arrays), structs and maps (json/jsonb), or a pointer to a
// pointer of these for columns that may be NULL (NULL leaves any other
// destination unchanged, as encoding/json does). A numeric value (an exact
// decimal string) goes into a *string as is, or into a number type, which
// parses it.
func (r *Rows) Get(i int, name string, dest any) error {
	c := r.ColumnIndex(name)
	if c < 0 {
		names := make([]string, len(r.Columns))
		for n, column := range r.Columns {
			names[n] = column.Name
		}
		return newError(KindNoSuchColumn, "no column %q (columns: %s)", name, strings.Join(names, ", "))
	}
	if i < 0 || i >= len(r.Rows) {
		return newError(KindNoSuchColumn, "no row %d (%d rows)", i, len(r.Rows))
	}
	var value any
	if c < len(r.Rows[i]) {
		value = r.Rows[i][c]
	}
	return convert(r.Columns[c], value, dest)
}

// convert stores value (of column) in dest, through its JSON form.
func convert(column Column, value any, dest any) error {
	if p, ok := dest.(*any); ok {
		*p = value
		return nil
	}
	var data []byte
	if text, ok := base64Value(value); ok {
		// encoding/json reads a base64 string into a []byte.
		data, _ = json.Marshal(text)
	} else {
		var err error
		if data, err = json.Marshal(value); err != nil {
			return newError(KindDecode, "column %q (%s): %v", column.Name, column.Type, err)
		}
	}
	err := json.Unmarshal(data, dest)
	if err != nil && column.Type == "numeric" {
		if text, ok := value.(string); ok && json.Valid([]byte(text)) && !strings.HasPrefix(text, `"`) {
			if json.Unmarshal([]byte(text), dest) == nil {
				return nil
			}
		}
	}
	if err != nil {
		return newError(KindDecode, "column %q (%s): cannot read %s into %T: %v", column.Name, column.Type, data, dest, err)
	}
	return nil
}
