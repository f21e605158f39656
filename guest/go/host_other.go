//go:build !wasip1

package wasmgate

// Native builds (go test) have no host: calls go to the function installed
// with SetTestHost.

var testHost func(function string, request []byte) []byte

// SetTestHost (native builds only) answers every call with host, which
// receives the import's name (FuncRedis, FuncPgQuery, FuncPgExecute) and the
// JSON request and returns the JSON answer, as the host would. nil removes
// it; without one every call fails with unavailable. For unit tests of a
// plugin's own logic; not safe for concurrent use.
func SetTestHost(host func(function string, request []byte) []byte) {
	testHost = host
}

func hostCall(function string, request []byte) []byte {
	if testHost == nil {
		return errorAnswer(KindUnavailable, "wasmgate:host/services::"+function+
			" exists only inside a wasm plugin (GOOS=wasip1); natively, install a stand-in with SetTestHost")
	}
	return testHost(function, request)
}
