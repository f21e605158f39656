module wasmgate/plugins/go/orders

go 1.24

require (
	github.com/extism/go-pdk v1.1.3
	github.com/wasmgate/wasmgate/guest/go v0.0.0
)

replace github.com/wasmgate/wasmgate/guest/go => ../../../guest/go
