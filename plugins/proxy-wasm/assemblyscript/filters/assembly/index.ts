// Proxy-Wasm filters written with the AssemblyScript SDK (@solo-io/proxy-runtime
// 0.1.8 on AssemblyScript 0.14.13), for wasmgate's SDK compatibility tests
// (crates/cli/tests/sdk_compat.rs). One module, one behaviour per root id (the
// plugin's `root_id` in wasmgate.yaml); the C++ twin is ../../../cpp/filters.
//
//   add_header   request header x-wasmgate-filter: <configuration> ("on" without
//                one); response headers x-seen-path, x-seen-host (property
//                request.host) and x-sdk; logs each request in onLog
//   local_reply  configuration "<path prefix> <status> <body>": requests under
//                the prefix get that local reply with header x-local-reply;
//                any other configuration is refused
//   body         buffers both bodies: a request body containing "secret"
//                becomes "redacted", a response body containing it becomes
//                "Original message body (<N> bytes) redacted.\n"; response
//                header x-request-body-bytes: the request body's size
//   shared_data  counts requests in shared data "hits" (compare-and-swap);
//                response header x-hits
//   http_call    configuration: an upstream name (default "auth"); calls
//                GET /bytes/1 there with the request's x-token; last byte even:
//                request headers x-auth: allowed and x-auth-status (the call's
//                :status), the request goes on; otherwise 403 "Access
//                forbidden.\n" with x-auth: denied; 503 if the call cannot be
//                dispatched
//   tick         ticks every 50 ms, counting in shared data "ticks"; response
//                header x-ticks
//
// Where the SDK's wrappers are broken (plugin configuration, shared data) or
// missing (proxy_set_buffer_bytes), this file calls the ABI directly; see
// docs/compatibility.md.

export * from "@solo-io/proxy-runtime/proxy";
import {
  RootContext,
  Context,
  registerRootContext,
  FilterHeadersStatusValues,
  FilterDataStatusValues,
  stream_context,
  log,
  LogLevelValues,
  send_local_response,
  GrpcStatusValues,
  HeaderPair,
  Headers,
  WasmResultValues,
} from "@solo-io/proxy-runtime";
import {
  set_tick_period_milliseconds,
  BufferTypeValues,
  HeaderMapTypeValues,
} from "@solo-io/proxy-runtime/runtime";
import * as abi from "@solo-io/proxy-runtime/imports";
import { free } from "@solo-io/proxy-runtime/malloc";

const SDK = "assemblyscript";

// The SDK has no binding for proxy_set_buffer_bytes.
// @ts-ignore: decorator
@external("env", "proxy_set_buffer_bytes")
declare function proxy_set_buffer_bytes(kind: i32, start: u32, length: u32, data: usize, size: usize): u32;

// ---------------------------------------------------------------------------
// Raw ABI helpers

// The two out-parameters of a host call that returns bytes. The host
// allocates the value with the exported `malloc` (the SDK's, which makes a
// retained ArrayBuffer) and writes its address and size here.
class Returned {
  ptr: usize = 0;
  size: usize = 0;

  ptrSlot(): usize {
    return changetype<usize>(this) + offsetof<Returned>("ptr");
  }

  sizeSlot(): usize {
    return changetype<usize>(this) + offsetof<Returned>("size");
  }

  // A copy of the value; the host's allocation is released.
  take(): ArrayBuffer {
    const copy = new ArrayBuffer(<i32>this.size);
    if (this.size > 0) {
      memory.copy(changetype<usize>(copy), this.ptr, this.size);
      free(this.ptr);
    }
    this.ptr = 0;
    this.size = 0;
    return copy;
  }
}

class U32Slot {
  value: u32 = 0;

  at(): usize {
    return changetype<usize>(this) + offsetof<U32Slot>("value");
  }
}

function utf8(s: string): ArrayBuffer {
  return String.UTF8.encode(s);
}

function text(bytes: ArrayBuffer): string {
  return String.UTF8.decode(bytes);
}

function pair(name: string, value: string): HeaderPair {
  return new HeaderPair(utf8(name), utf8(value));
}

// `length` bytes of a buffer (body, configuration, call response), or none.
function bufferBytes(kind: BufferTypeValues, length: u32): ArrayBuffer {
  if (length == 0) {
    return new ArrayBuffer(0);
  }
  const out = new Returned();
  const status = abi.proxy_get_buffer_bytes(kind, 0, length, out.ptrSlot(), out.sizeSlot());
  if (status != WasmResultValues.Ok) {
    return new ArrayBuffer(0);
  }
  return out.take();
}

function setBuffer(kind: BufferTypeValues, replacedLength: u32, data: ArrayBuffer): void {
  const status = proxy_set_buffer_bytes(kind, 0, replacedLength, changetype<usize>(data), data.byteLength);
  if (status != WasmResultValues.Ok) {
    log(LogLevelValues.warn, "proxy_set_buffer_bytes: status " + status.toString());
  }
}

// A property by its path segments ("request", "host"), "" when absent.
function property(first: string, second: string): string {
  const path = utf8(first + "\0" + second);
  const out = new Returned();
  const status = abi.proxy_get_property(changetype<usize>(path), path.byteLength, out.ptrSlot(), out.sizeSlot());
  if (status != WasmResultValues.Ok) {
    return "";
  }
  return text(out.take());
}

// Removes a header whether or not it is there (the SDK's remove() aborts the
// module on any status but Ok).
function removeHeader(map: HeaderMapTypeValues, name: string): void {
  const key = utf8(name);
  abi.proxy_remove_header_map_value(map, changetype<usize>(key), key.byteLength);
}

function parseDecimal(s: string): u64 {
  let n: u64 = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) {
      return 0;
    }
    n = n * 10 + <u64>(c - 48);
  }
  return n;
}

// Shared data through the ABI: the SDK's get_shared_data() passes its
// buffer's address and length where the host expects out-pointers, and
// set_shared_data() takes no value.
class SharedValue {
  found: bool = false;
  value: string = "";
  cas: u32 = 0;
}

function getShared(key: string): SharedValue {
  const name = utf8(key);
  const out = new Returned();
  const cas = new U32Slot();
  const result = new SharedValue();
  const status = abi.proxy_get_shared_data(changetype<usize>(name), name.byteLength, out.ptrSlot(), out.sizeSlot(), cas.at());
  if (status == WasmResultValues.Ok) {
    result.found = true;
    result.value = text(out.take());
    result.cas = cas.value;
  }
  return result;
}

// Adds one to the decimal counter `key`, retrying on a CAS mismatch; the new
// value, or 0 when the host refuses the write.
function incrementShared(key: string): u64 {
  const name = utf8(key);
  while (true) {
    const current = getShared(key);
    const next = parseDecimal(current.value) + 1;
    const value = utf8(next.toString());
    const status = abi.proxy_set_shared_data(changetype<usize>(name), name.byteLength, changetype<usize>(value), value.byteLength, current.cas);
    if (status == WasmResultValues.Ok) {
      return next;
    }
    if (status != WasmResultValues.CasMismatch) {
      log(LogLevelValues.warn, "proxy_set_shared_data(" + key + "): status " + status.toString());
      return 0;
    }
  }
  return 0;
}

function contains(haystack: ArrayBuffer, needle: string): bool {
  const n = utf8(needle);
  const h = changetype<usize>(haystack);
  const p = changetype<usize>(n);
  const last = haystack.byteLength - n.byteLength;
  for (let i = 0; i <= last; i++) {
    let j = 0;
    while (j < n.byteLength && load<u8>(h + i + j) == load<u8>(p + j)) {
      j++;
    }
    if (j == n.byteLength) {
      return true;
    }
  }
  return false;
}

// The plugin configuration, read through the ABI. Every root context here
// overrides onConfigure: the SDK's own passes the configuration's size where
// the host expects the address of the size out-parameter (so the host writes
// 4 bytes at that address), and with an empty configuration, which the host
// leaves unwritten, it decodes and frees again the last buffer the SDK
// received (the plugin_root_id property's), corrupting its heap. (A shared
// base class with an overridable hook does not work either: AssemblyScript
// 0.14's virtual stub for it traps.)
function pluginConfiguration(size: u32): string {
  return text(bufferBytes(BufferTypeValues.PluginConfiguration, size));
}

// ---------------------------------------------------------------------------
// add_header

class AddHeaderRoot extends RootContext {
  value: string = "on";

  onConfigure(size: u32): bool {
    const conf = pluginConfiguration(size);
    this.value = conf.length > 0 ? conf : "on";
    return true;
  }

  createContext(id: u32): Context {
    return new AddHeader(id, this);
  }
}

class AddHeader extends Context {
  value: string;
  path: string = "";

  constructor(id: u32, root: AddHeaderRoot) {
    super(id, root);
    this.value = root.value;
  }

  onRequestHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    stream_context.headers.request.add("x-wasmgate-filter", this.value);
    this.path = stream_context.headers.request.get(":path");
    return FilterHeadersStatusValues.Continue;
  }

  onResponseHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    stream_context.headers.response.add("x-seen-path", this.path);
    stream_context.headers.response.add("x-seen-host", property("request", "host"));
    stream_context.headers.response.add("x-sdk", SDK);
    return FilterHeadersStatusValues.Continue;
  }

  onLog(): void {
    log(LogLevelValues.info, SDK + " add_header: #" + this.context_id.toString() + " done with " + this.path);
  }
}

// ---------------------------------------------------------------------------
// local_reply

class LocalReplyRoot extends RootContext {
  prefix: string = "";
  status: u32 = 0;
  body: string = "";

  onConfigure(size: u32): bool {
    const conf = pluginConfiguration(size);
    const first = conf.indexOf(" ");
    const second = first < 0 ? -1 : conf.indexOf(" ", first + 1);
    const statusText = first < 0 ? "" : (second < 0 ? conf.substring(first + 1) : conf.substring(first + 1, second));
    const status = <u32>parseDecimal(statusText);
    if (first <= 0 || status < 200 || status > 599) {
      log(LogLevelValues.warn, "local_reply: configuration must be \"<path prefix> <status> <body>\", got \"" + conf + "\"");
      return false;
    }
    this.prefix = conf.substring(0, first);
    this.status = status;
    this.body = second < 0 ? "" : conf.substring(second + 1);
    return true;
  }

  createContext(id: u32): Context {
    return new LocalReply(id, this);
  }
}

class LocalReply extends Context {
  conf: LocalReplyRoot;

  constructor(id: u32, root: LocalReplyRoot) {
    super(id, root);
    this.conf = root;
  }

  onRequestHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    const path = stream_context.headers.request.get(":path");
    if (!path.startsWith(this.conf.prefix)) {
      return FilterHeadersStatusValues.Continue;
    }
    const extra: Headers = [];
    extra.push(pair("x-local-reply", SDK));
    send_local_response(this.conf.status, "local_reply", utf8(this.conf.body), extra, GrpcStatusValues.InvalidCode);
    return FilterHeadersStatusValues.StopIteration;
  }
}

// ---------------------------------------------------------------------------
// body

class BodyRoot extends RootContext {
  onConfigure(size: u32): bool {
    return true;
  }

  createContext(id: u32): Context {
    return new Body(id, this);
  }
}

class Body extends Context {
  requestBytes: u32 = 0;

  constructor(id: u32, root: BodyRoot) {
    super(id, root);
  }

  onRequestHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    removeHeader(HeaderMapTypeValues.RequestHeaders, "content-length");
    return FilterHeadersStatusValues.Continue;
  }

  onRequestBody(length: usize, end_of_stream: bool): FilterDataStatusValues {
    if (!end_of_stream) {
      return FilterDataStatusValues.StopIterationAndBuffer;
    }
    const body = bufferBytes(BufferTypeValues.HttpRequestBody, <u32>length);
    this.requestBytes = body.byteLength;
    if (contains(body, "secret")) {
      setBuffer(BufferTypeValues.HttpRequestBody, body.byteLength, utf8("redacted"));
    }
    return FilterDataStatusValues.Continue;
  }

  onResponseHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    removeHeader(HeaderMapTypeValues.ResponseHeaders, "content-length");
    stream_context.headers.response.add("x-request-body-bytes", this.requestBytes.toString());
    return FilterHeadersStatusValues.Continue;
  }

  onResponseBody(length: usize, end_of_stream: bool): FilterDataStatusValues {
    if (!end_of_stream) {
      return FilterDataStatusValues.StopIterationAndBuffer;
    }
    const body = bufferBytes(BufferTypeValues.HttpResponseBody, <u32>length);
    if (contains(body, "secret")) {
      const replacement = "Original message body (" + body.byteLength.toString() + " bytes) redacted.\n";
      setBuffer(BufferTypeValues.HttpResponseBody, body.byteLength, utf8(replacement));
    }
    return FilterDataStatusValues.Continue;
  }
}

// ---------------------------------------------------------------------------
// shared_data

class SharedDataRoot extends RootContext {
  onConfigure(size: u32): bool {
    return true;
  }

  createContext(id: u32): Context {
    return new SharedData(id, this);
  }
}

class SharedData extends Context {
  hits: u64 = 0;

  constructor(id: u32, root: SharedDataRoot) {
    super(id, root);
  }

  onRequestHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    this.hits = incrementShared("hits");
    return FilterHeadersStatusValues.Continue;
  }

  onResponseHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    stream_context.headers.response.add("x-hits", this.hits.toString());
    return FilterHeadersStatusValues.Continue;
  }
}

// ---------------------------------------------------------------------------
// http_call

class HttpCallRoot extends RootContext {
  upstream: string = "auth";

  onConfigure(size: u32): bool {
    const conf = pluginConfiguration(size);
    this.upstream = conf.length > 0 ? conf : "auth";
    return true;
  }

  createContext(id: u32): Context {
    return new HttpCall(id, this);
  }
}

// The answer to a call (AssemblyScript 0.14 has no closures: the SDK hands
// the stream's context back, and has made it the effective one).
function onAuthResponse(origin: Context, headers: u32, body_size: usize, trailers: u32): void {
  const body = bufferBytes(BufferTypeValues.HttpCallResponseBody, <u32>body_size);
  const status = stream_context.headers.http_callback.get(":status");
  const size = body.byteLength;
  if (size > 0 && load<u8>(changetype<usize>(body) + size - 1) % 2 == 0) {
    stream_context.headers.request.add("x-auth", "allowed");
    stream_context.headers.request.add("x-auth-status", status);
    origin.continueRequest();
    return;
  }
  const extra: Headers = [];
  extra.push(pair("x-auth", "denied"));
  if (status.length > 0) {
    extra.push(pair("x-auth-status", status));
  }
  send_local_response(403, "access_forbidden", utf8("Access forbidden.\n"), extra, GrpcStatusValues.InvalidCode);
}

class HttpCall extends Context {
  upstream: string;

  constructor(id: u32, root: HttpCallRoot) {
    super(id, root);
    this.upstream = root.upstream;
  }

  onRequestHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    const call: Headers = [];
    call.push(pair(":method", "GET"));
    call.push(pair(":path", "/bytes/1"));
    call.push(pair(":authority", "auth"));
    call.push(pair("x-token", stream_context.headers.request.get("x-token")));
    const status = this.root_context.httpCall(this.upstream, call, new ArrayBuffer(0), [], 5000, this, onAuthResponse);
    if (status != WasmResultValues.Ok) {
      log(LogLevelValues.warn, "http_call: dispatch to " + this.upstream + " failed: status " + status.toString());
      send_local_response(503, "auth_unavailable", utf8("auth upstream unavailable\n"), [], GrpcStatusValues.InvalidCode);
    }
    // Held either way: until the answer comes, or for good after the 503.
    return FilterHeadersStatusValues.StopIteration;
  }
}

// ---------------------------------------------------------------------------
// tick

class TickRoot extends RootContext {
  onConfigure(size: u32): bool {
    set_tick_period_milliseconds(50);
    return true;
  }

  onTick(): void {
    incrementShared("ticks");
  }

  createContext(id: u32): Context {
    return new Tick(id, this);
  }
}

class Tick extends Context {
  constructor(id: u32, root: TickRoot) {
    super(id, root);
  }

  onResponseHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    const ticks = getShared("ticks");
    stream_context.headers.response.add("x-ticks", ticks.found ? ticks.value : "0");
    return FilterHeadersStatusValues.Continue;
  }
}

// ---------------------------------------------------------------------------

registerRootContext((id: u32): RootContext => new AddHeaderRoot(id), "add_header");
registerRootContext((id: u32): RootContext => new LocalReplyRoot(id), "local_reply");
registerRootContext((id: u32): RootContext => new BodyRoot(id), "body");
registerRootContext((id: u32): RootContext => new SharedDataRoot(id), "shared_data");
registerRootContext((id: u32): RootContext => new HttpCallRoot(id), "http_call");
registerRootContext((id: u32): RootContext => new TickRoot(id), "tick");
