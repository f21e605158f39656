// The AssemblyScript counterpart of the Rust hello and count_vowels plugins
// (plugins/rust/hello, plugins/rust/count_vowels), on @extism/as-pdk 1.0.0
// (AssemblyScript 0.27.37): built by plugins/build.sh into as_hello.wasm.
//
//   hello         input a name; output {"message":"Hello <name>"}
//   count_vowels  output {"count":N,"total":T,"vowels":"..."}; vowels from
//                 config `vowels` (default aeiouAEIOU), running total in var
//                 `total` (a decimal string); logs the count at info level
//   fetch         input a URL; GETs it (the host's allowed hosts apply), logs
//                 the status at info level and outputs the response body

import { Host, Config, Var, LogLevel, Memory } from "@extism/as-pdk";
import { error_set, http_request, length } from "@extism/as-pdk/lib/env";

// The PDK has no HTTP wrapper and does not import http_status_code.
// @ts-ignore: decorator
@external("extism:host/env", "http_status_code")
declare function http_status_code(): i32;

// An AssemblyScript abort (a failed assertion, an index out of range) becomes
// the call's error instead of an import of env.abort.
function handleAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  let text = message === null ? "abort" : message;
  if (fileName !== null) {
    text += " at " + fileName + ":" + line.toString() + ":" + column.toString();
  }
  error_set(Memory.allocateString(text).offset);
  unreachable();
}

// The output as UTF-8. (The PDK's Host.outputString allocates the string's
// length in UTF-16 units, which is short for any non-ASCII text.)
function output(text: string): void {
  Host.output(Uint8Array.wrap(String.UTF8.encode(text)));
}

// A JSON string literal, escaped as serde_json escapes it.
function jsonString(s: string): string {
  let out = "\"";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 0x22) {
      out += "\\\"";
    } else if (c == 0x5c) {
      out += "\\\\";
    } else if (c == 0x0a) {
      out += "\\n";
    } else if (c == 0x0d) {
      out += "\\r";
    } else if (c == 0x09) {
      out += "\\t";
    } else if (c == 0x08) {
      out += "\\b";
    } else if (c == 0x0c) {
      out += "\\f";
    } else if (c < 0x20) {
      out += "\\u00" + (c < 0x10 ? "0" : "") + c.toString(16);
    } else {
      out += String.fromCharCode(c);
    }
  }
  return out + "\"";
}

function parseDecimal(s: string): u64 {
  let n: u64 = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) {
      break;
    }
    n = n * 10 + <u64>(c - 48);
  }
  return n;
}

export function hello(): i32 {
  const name = Host.inputString();
  output("{\"message\":" + jsonString("Hello " + name) + "}");
  return 0;
}

export function count_vowels(): i32 {
  const configured = Config.get("vowels");
  const vowels = configured === null ? "aeiouAEIOU" : configured;
  const input = Host.inputString();
  let count: u64 = 0;
  // By code point, as Rust's chars().
  for (let i = 0; i < input.length; i++) {
    const c = input.codePointAt(i);
    if (c > 0xffff) {
      i++;
    }
    if (vowels.includes(String.fromCodePoint(c))) {
      count++;
    }
  }
  const previous = Var.getString("total");
  const total = count + (previous === null ? 0 : parseDecimal(previous));
  Var.set("total", Uint8Array.wrap(String.UTF8.encode(total.toString())));
  Host.log(LogLevel.Info, "count_vowels: " + count.toString() + " vowels, total " + total.toString());
  output("{\"count\":" + count.toString() + ",\"total\":" + total.toString() + ",\"vowels\":" + jsonString(vowels) + "}");
  return 0;
}

export function fetch(): i32 {
  const url = Host.inputString();
  const request = Memory.allocateString("{\"url\":" + jsonString(url) + ",\"method\":\"GET\"}");
  const response = http_request(request.offset, 0);
  Host.log(LogLevel.Info, "fetch: " + http_status_code().toString());
  if (response != 0) {
    Host.outputMemory(new Memory(response, length(response)));
  }
  return 0;
}
