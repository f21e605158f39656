// Package main is the Go counterpart of the Rust orders plugin's
// list_orders, add_order and visits, on the wasmgate guest library
// (guest/go), built with standard Go for wasip1 as a reactor (c-shared).
// PostgreSQL service "orders" (table in plugins/rust/orders/schema.sql),
// Redis service "cache".
package main

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/extism/go-pdk"
	wasmgate "github.com/wasmgate/wasmgate/guest/go"
)

const (
	pg    = "orders"
	cache = "cache"
)

// fail reports err as the call's error.
func fail(err error) int32 {
	pdk.SetError(err)
	return 1
}

// list_orders: input a customer id; output that customer's orders, a JSON
// array of objects.
//
//go:wasmexport list_orders
func listOrders() int32 {
	rows, err := wasmgate.PgQuery(pg,
		"select id, customer, total, created_at, items, note from orders where customer = $1 order by id",
		pdk.InputString())
	if err != nil {
		return fail(err)
	}
	out, err := rows.JSON()
	if err != nil {
		return fail(err)
	}
	pdk.Output(out)
	return 0
}

type newOrder struct {
	Customer string          `json:"customer"`
	Total    json.RawMessage `json:"total"` // a string ("12.50", exact) or a number
	Items    json.RawMessage `json:"items"`
	Note     *string         `json:"note"`
}

// add_order: input {"customer", "total", "items"?, "note"?}; output {"id": N}.
//
//go:wasmexport add_order
func addOrder() int32 {
	var order newOrder
	if err := pdk.InputJSON(&order); err != nil {
		return fail(err)
	}
	if len(order.Total) == 0 {
		return fail(errors.New("total is missing"))
	}
	if len(order.Items) == 0 || string(order.Items) == "null" {
		order.Items = json.RawMessage("[]")
	}
	rows, err := wasmgate.PgQuery(pg,
		"insert into orders (customer, total, items, note) values ($1, $2, $3, $4) returning id",
		order.Customer, order.Total, order.Items, order.Note)
	if err != nil {
		return fail(err)
	}
	var id int64
	if err := rows.Get(0, "id", &id); err != nil {
		return fail(err)
	}
	pdk.OutputString(`{"id":` + strconv.FormatInt(id, 10) + `}`)
	return 0
}

// visits: input a key; INCRs it on cache; output the new count in decimal.
//
//go:wasmexport visits
func visits() int32 {
	n, err := wasmgate.RedisIncr(cache, pdk.InputString())
	if err != nil {
		return fail(err)
	}
	pdk.OutputString(strconv.FormatInt(n, 10))
	return 0
}

func main() {}
