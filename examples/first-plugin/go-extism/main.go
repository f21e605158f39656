// A first Extism plugin in Go: `greet` answers "<greeting>, <input>!",
// where the greeting comes from the plugin's config (default "Hello").
package main

import "github.com/extism/go-pdk"

//go:wasmexport greet
func greet() int32 {
	name := string(pdk.Input())
	if name == "" {
		pdk.SetErrorString("give me a name")
		return 1
	}
	greeting, ok := pdk.GetConfig("greeting")
	if !ok {
		greeting = "Hello"
	}
	pdk.OutputString(greeting + ", " + name + "!")
	return 0
}

// main is required by Go but never runs: the module is a reactor
// (-buildmode=c-shared) and wasmgate calls the exported functions.
func main() {}
