//go:build wasip1

package wasmgate

import "github.com/extism/go-pdk"

// The imports: each takes a handle to an Extism memory block holding the
// JSON request and returns a handle to a block holding the JSON answer.

//go:wasmimport wasmgate:host/services redis
func hostRedis(request uint64) uint64

//go:wasmimport wasmgate:host/services pg_query
func hostPgQuery(request uint64) uint64

//go:wasmimport wasmgate:host/services pg_execute
func hostPgExecute(request uint64) uint64

// hostCall places request in Extism memory, calls the import and copies the
// answer out. Both blocks are the guest's (as with extism:host/user
// functions): the request is freed after the call, the answer once copied.
func hostCall(function string, request []byte) []byte {
	block := pdk.AllocateBytes(request)
	if block.Offset() == 0 && len(request) > 0 {
		return errorAnswer(KindEncode, "cannot place the request in memory: Extism memory is full")
	}
	var handle uint64
	switch function {
	case FuncRedis:
		handle = hostRedis(block.Offset())
	case FuncPgQuery:
		handle = hostPgQuery(block.Offset())
	default:
		handle = hostPgExecute(block.Offset())
	}
	block.Free()
	answer := pdk.FindMemory(handle)
	if answer.Length() == 0 {
		return errorAnswer(KindDecode, "the host's "+function+" answer is empty")
	}
	data := answer.ReadBytes()
	answer.Free()
	return data
}
