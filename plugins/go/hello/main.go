// Package main is the Go counterpart of the Rust hello and count_vowels
// plugins, built with standard Go for wasip1 as a reactor (c-shared).
package main

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/extism/go-pdk"
)

//go:wasmexport hello
func hello() int32 {
	name := string(pdk.Input())
	out, _ := json.Marshal(map[string]string{"message": "Hello " + name})
	pdk.Output(out)
	return 0
}

//go:wasmexport count_vowels
func countVowels() int32 {
	vowels, ok := pdk.GetConfig("vowels")
	if !ok {
		vowels = "aeiouAEIOU"
	}
	count := 0
	for _, c := range string(pdk.Input()) {
		if strings.ContainsRune(vowels, c) {
			count++
		}
	}
	total := count
	if previous := pdk.GetVar("total"); previous != nil {
		if n, err := strconv.Atoi(string(previous)); err == nil {
			total += n
		}
	}
	pdk.SetVar("total", []byte(strconv.Itoa(total)))
	// Field order matches the Rust plugin's output (serde_json sorts keys).
	out := `{"count":` + strconv.Itoa(count) + `,"total":` + strconv.Itoa(total) + `,"vowels":` + strconv.Quote(vowels) + `}`
	pdk.OutputString(out)
	return 0
}

func main() {}
