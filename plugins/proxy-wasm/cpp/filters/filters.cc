// Proxy-Wasm filters written with the C++ SDK (proxy-wasm-cpp-sdk, vendored in
// plugins/third_party/proxy-wasm-cpp-sdk, built without protobuf by Debian's
// emscripten), for wasmgate's SDK compatibility tests
// (crates/cli/tests/sdk_compat.rs). One module, one behaviour per root id (the
// plugin's `root_id` in wasmgate.yaml), with the same contracts as the
// AssemblyScript twin (../../assemblyscript/filters/assembly/index.ts):
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

#include <cstdint>
#include <string>
#include <string_view>

#include "proxy_wasm_intrinsics.h"

namespace {

constexpr std::string_view kSdk = "cpp";

std::string pluginConfiguration(size_t size) {
  if (size == 0) {
    return "";
  }
  return getBufferBytes(WasmBufferType::PluginConfiguration, 0, size)->toString();
}

uint64_t parseDecimal(std::string_view s) {
  uint64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') {
      return 0;
    }
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

// Adds one to the decimal counter `key` in shared data, retrying on a CAS
// mismatch; the new value, or 0 when the host refuses the write.
uint64_t incrementShared(std::string_view key) {
  for (;;) {
    WasmDataPtr value;
    uint32_t cas = 0;
    uint64_t current = 0;
    if (getSharedData(key, &value, &cas) == WasmResult::Ok) {
      current = parseDecimal(value->view());
    }
    const uint64_t next = current + 1;
    const WasmResult result = setSharedData(key, std::to_string(next), cas);
    if (result == WasmResult::Ok) {
      return next;
    }
    if (result != WasmResult::CasMismatch) {
      logWarn("setSharedData(" + std::string(key) + "): " + toString(result));
      return 0;
    }
  }
}

// ---------------------------------------------------------------------------
// add_header

class AddHeaderRoot : public RootContext {
public:
  AddHeaderRoot(uint32_t id, std::string_view root_id) : RootContext(id, root_id) {}

  bool onConfigure(size_t size) override {
    value_ = pluginConfiguration(size);
    if (value_.empty()) {
      value_ = "on";
    }
    return true;
  }

  std::string value_ = "on";
};

class AddHeader : public Context {
public:
  AddHeader(uint32_t id, RootContext *root) : Context(id, root) {}

  FilterHeadersStatus onRequestHeaders(uint32_t, bool) override {
    addRequestHeader("x-wasmgate-filter", static_cast<AddHeaderRoot *>(root())->value_);
    path_ = getRequestHeader(":path")->toString();
    return FilterHeadersStatus::Continue;
  }

  FilterHeadersStatus onResponseHeaders(uint32_t, bool) override {
    addResponseHeader("x-seen-path", path_);
    std::string host;
    if (auto value = getProperty({"request", "host"})) {
      host = (*value)->toString();
    }
    addResponseHeader("x-seen-host", host);
    addResponseHeader("x-sdk", kSdk);
    return FilterHeadersStatus::Continue;
  }

  void onLog() override {
    logInfo(std::string(kSdk) + " add_header: #" + std::to_string(id()) + " done with " + path_);
  }

private:
  std::string path_;
};

// ---------------------------------------------------------------------------
// local_reply

class LocalReplyRoot : public RootContext {
public:
  LocalReplyRoot(uint32_t id, std::string_view root_id) : RootContext(id, root_id) {}

  bool onConfigure(size_t size) override {
    const std::string conf = pluginConfiguration(size);
    const size_t first = conf.find(' ');
    const size_t second = first == std::string::npos ? std::string::npos : conf.find(' ', first + 1);
    std::string_view status_text;
    if (first != std::string::npos) {
      status_text = std::string_view(conf).substr(
          first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
    }
    const uint64_t status = parseDecimal(status_text);
    if (first == 0 || first == std::string::npos || status < 200 || status > 599) {
      logWarn("local_reply: configuration must be \"<path prefix> <status> <body>\", got \"" +
              conf + "\"");
      return false;
    }
    prefix_ = conf.substr(0, first);
    status_ = static_cast<uint32_t>(status);
    body_ = second == std::string::npos ? "" : conf.substr(second + 1);
    return true;
  }

  std::string prefix_;
  uint32_t status_ = 0;
  std::string body_;
};

class LocalReply : public Context {
public:
  LocalReply(uint32_t id, RootContext *root) : Context(id, root) {}

  FilterHeadersStatus onRequestHeaders(uint32_t, bool) override {
    auto *conf = static_cast<LocalReplyRoot *>(root());
    const std::string path = getRequestHeader(":path")->toString();
    if (path.compare(0, conf->prefix_.size(), conf->prefix_) != 0) {
      return FilterHeadersStatus::Continue;
    }
    sendLocalResponse(conf->status_, "local_reply", conf->body_,
                      {{"x-local-reply", std::string(kSdk)}});
    return FilterHeadersStatus::StopIteration;
  }
};

// ---------------------------------------------------------------------------
// body

class Body : public Context {
public:
  Body(uint32_t id, RootContext *root) : Context(id, root) {}

  FilterHeadersStatus onRequestHeaders(uint32_t, bool) override {
    removeRequestHeader("content-length");
    return FilterHeadersStatus::Continue;
  }

  FilterDataStatus onRequestBody(size_t length, bool end_of_stream) override {
    if (!end_of_stream) {
      return FilterDataStatus::StopIterationAndBuffer;
    }
    auto body = getBufferBytes(WasmBufferType::HttpRequestBody, 0, length);
    request_bytes_ = body->size();
    if (body->view().find("secret") != std::string_view::npos) {
      setBuffer(WasmBufferType::HttpRequestBody, 0, body->size(), "redacted");
    }
    return FilterDataStatus::Continue;
  }

  FilterHeadersStatus onResponseHeaders(uint32_t, bool) override {
    removeResponseHeader("content-length");
    addResponseHeader("x-request-body-bytes", std::to_string(request_bytes_));
    return FilterHeadersStatus::Continue;
  }

  FilterDataStatus onResponseBody(size_t length, bool end_of_stream) override {
    if (!end_of_stream) {
      return FilterDataStatus::StopIterationAndBuffer;
    }
    auto body = getBufferBytes(WasmBufferType::HttpResponseBody, 0, length);
    if (body->view().find("secret") != std::string_view::npos) {
      setBuffer(WasmBufferType::HttpResponseBody, 0, body->size(),
                "Original message body (" + std::to_string(body->size()) + " bytes) redacted.\n");
    }
    return FilterDataStatus::Continue;
  }

private:
  size_t request_bytes_ = 0;
};

// ---------------------------------------------------------------------------
// shared_data

class SharedData : public Context {
public:
  SharedData(uint32_t id, RootContext *root) : Context(id, root) {}

  FilterHeadersStatus onRequestHeaders(uint32_t, bool) override {
    hits_ = incrementShared("hits");
    return FilterHeadersStatus::Continue;
  }

  FilterHeadersStatus onResponseHeaders(uint32_t, bool) override {
    addResponseHeader("x-hits", std::to_string(hits_));
    return FilterHeadersStatus::Continue;
  }

private:
  uint64_t hits_ = 0;
};

// ---------------------------------------------------------------------------
// http_call

class HttpCallRoot : public RootContext {
public:
  HttpCallRoot(uint32_t id, std::string_view root_id) : RootContext(id, root_id) {}

  bool onConfigure(size_t size) override {
    upstream_ = pluginConfiguration(size);
    if (upstream_.empty()) {
      upstream_ = "auth";
    }
    return true;
  }

  std::string upstream_ = "auth";
};

class HttpCall : public Context {
public:
  HttpCall(uint32_t id, RootContext *root) : Context(id, root) {}

  FilterHeadersStatus onRequestHeaders(uint32_t, bool) override {
    auto *conf = static_cast<HttpCallRoot *>(root());
    const uint32_t stream = id();
    const WasmResult result = root()->httpCall(
        conf->upstream_,
        {{":method", "GET"},
         {":path", "/bytes/1"},
         {":authority", "auth"},
         {"x-token", getRequestHeader("x-token")->toString()}},
        "", {}, 5000,
        [stream](uint32_t, size_t body_size, uint32_t) { answered(stream, body_size); });
    if (result != WasmResult::Ok) {
      logWarn("http_call: dispatch to " + conf->upstream_ + " failed: " + toString(result));
      sendLocalResponse(503, "auth_unavailable", "auth upstream unavailable\n", {});
    }
    // Held either way: until the answer comes, or for good after the 503.
    return FilterHeadersStatus::StopIteration;
  }

private:
  // Runs on the root context: the stream's headers are reachable once it is
  // made the effective context (it may be gone by now).
  static void answered(uint32_t stream, size_t body_size) {
    auto body = getBufferBytes(WasmBufferType::HttpCallResponseBody, 0, body_size);
    const std::string status =
        getHeaderMapValue(WasmHeaderMapType::HttpCallResponseHeaders, ":status")->toString();
    if (proxy_set_effective_context(stream) != WasmResult::Ok) {
      return;
    }
    const std::string_view bytes = body->view();
    if (!bytes.empty() && static_cast<uint8_t>(bytes.back()) % 2 == 0) {
      addRequestHeader("x-auth", "allowed");
      addRequestHeader("x-auth-status", status);
      continueRequest();
      return;
    }
    HeaderStringPairs headers = {{"x-auth", "denied"}};
    if (!status.empty()) {
      headers.emplace_back("x-auth-status", status);
    }
    sendLocalResponse(403, "access_forbidden", "Access forbidden.\n", headers);
  }
};

// ---------------------------------------------------------------------------
// tick

class TickRoot : public RootContext {
public:
  TickRoot(uint32_t id, std::string_view root_id) : RootContext(id, root_id) {}

  bool onConfigure(size_t) override {
    proxy_set_tick_period_milliseconds(50);
    return true;
  }

  void onTick() override { incrementShared("ticks"); }
};

class Tick : public Context {
public:
  Tick(uint32_t id, RootContext *root) : Context(id, root) {}

  FilterHeadersStatus onResponseHeaders(uint32_t, bool) override {
    WasmDataPtr value;
    std::string ticks = "0";
    if (getSharedData("ticks", &value) == WasmResult::Ok) {
      ticks = value->toString();
    }
    addResponseHeader("x-ticks", ticks);
    return FilterHeadersStatus::Continue;
  }
};

// Root contexts without state of their own.
class PlainRoot : public RootContext {
public:
  PlainRoot(uint32_t id, std::string_view root_id) : RootContext(id, root_id) {}
};

} // namespace

static RegisterContextFactory add_header(CONTEXT_FACTORY(AddHeader), ROOT_FACTORY(AddHeaderRoot),
                                         "add_header");
static RegisterContextFactory local_reply(CONTEXT_FACTORY(LocalReply),
                                          ROOT_FACTORY(LocalReplyRoot), "local_reply");
static RegisterContextFactory body(CONTEXT_FACTORY(Body), ROOT_FACTORY(PlainRoot), "body");
static RegisterContextFactory shared_data(CONTEXT_FACTORY(SharedData), ROOT_FACTORY(PlainRoot),
                                          "shared_data");
static RegisterContextFactory http_call(CONTEXT_FACTORY(HttpCall), ROOT_FACTORY(HttpCallRoot),
                                        "http_call");
static RegisterContextFactory tick(CONTEXT_FACTORY(Tick), ROOT_FACTORY(TickRoot), "tick");
