// Command gopgx is the Go reference of the database benchmark (bench/db.sh,
// issue 14): Go Fiber v2 with pgx v5's pool, doing what the `orders` plugin's
// `list_orders` does. POST / with a customer id as the body answers that
// customer's orders as a JSON array of objects.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgxpool"
)

const listOrders = "select id, customer, total, created_at, items, note from orders where customer = $1 order by id"

func main() {
	addr := flag.String("addr", "127.0.0.1:8094", "listen address")
	url := flag.String("url", "", "postgres:// URL (pgx's pool settings, e.g. pool_max_conns=16, may be in it)")
	flag.Parse()

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		log.Fatalf("pool: %v", err)
	}
	defer pool.Close()

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/", func(c *fiber.Ctx) error {
		// Fiber reuses the body's buffer after the handler: copy it.
		customer := string(c.Body())
		rows, err := pool.Query(c.UserContext(), listOrders, customer)
		if err != nil {
			return c.Status(500).JSON(fiber.Map{"error": err.Error()})
		}
		defer rows.Close()
		out := []map[string]any{}
		fields := rows.FieldDescriptions()
		for rows.Next() {
			values, err := rows.Values()
			if err != nil {
				return c.Status(500).JSON(fiber.Map{"error": err.Error()})
			}
			row := make(map[string]any, len(values))
			for i, v := range values {
				row[fields[i].Name] = v
			}
			out = append(out, row)
		}
		if err := rows.Err(); err != nil {
			return c.Status(500).JSON(fiber.Map{"error": err.Error()})
		}
		body, err := json.Marshal(out)
		if err != nil {
			return err
		}
		c.Set("content-type", "application/json")
		return c.Send(body)
	})
	log.Fatal(app.Listen(*addr))
}
