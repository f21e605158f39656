// Command gofiber is the reference server for wasmgate's HTTP benchmark: the
// design of a well-known article, a Go Fiber server around the Extism Go SDK,
// in its two working variants: one plugin instance behind a mutex, and a
// pool of instances. POST / calls the plugin function with the body as input.
package main

import (
	"context"
	"flag"
	"log"
	"runtime"
	"sync"

	extism "github.com/extism/go-sdk"
	"github.com/gofiber/fiber/v2"
)

func main() {
	wasm := flag.String("wasm", "", "plugin .wasm file")
	function := flag.String("func", "hello", "function to call")
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	mode := flag.String("mode", "pool", "mutex | pool")
	poolSize := flag.Int("pool", runtime.GOMAXPROCS(0)*4, "instances in pool mode")
	flag.Parse()

	ctx := context.Background()
	manifest := extism.Manifest{Wasm: []extism.Wasm{extism.WasmFile{Path: *wasm}}}
	compiled, err := extism.NewCompiledPlugin(ctx, manifest, extism.PluginConfig{EnableWasi: true}, nil)
	if err != nil {
		log.Fatalf("compiling %s: %v", *wasm, err)
	}
	newInstance := func() *extism.Plugin {
		p, err := compiled.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			log.Fatalf("instantiating: %v", err)
		}
		return p
	}

	var call func(input []byte) ([]byte, error)
	switch *mode {
	case "mutex":
		var mu sync.Mutex
		instance := newInstance()
		call = func(input []byte) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			_, out, err := instance.Call(*function, input)
			// The output aliases plugin memory: copy it before unlocking.
			return append([]byte(nil), out...), err
		}
	case "pool":
		pool := make(chan *extism.Plugin, *poolSize)
		for i := 0; i < *poolSize; i++ {
			pool <- newInstance()
		}
		call = func(input []byte) ([]byte, error) {
			instance := <-pool
			defer func() { pool <- instance }()
			_, out, err := instance.Call(*function, input)
			return append([]byte(nil), out...), err
		}
	default:
		log.Fatalf("unknown -mode %q", *mode)
	}

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/", func(c *fiber.Ctx) error {
		out, err := call(c.Body())
		if err != nil {
			return c.Status(500).SendString(err.Error())
		}
		c.Set("Content-Type", "application/json")
		return c.Send(out)
	})
	log.Fatal(app.Listen(*addr))
}
