// The C counterpart of the Rust hello and count_vowels plugins
// (plugins/rust/hello, plugins/rust/count_vowels), on the Extism C PDK
// (plugins/third_party/extism-c-pdk, header only) without a libc: built by
// plugins/build.sh with clang for wasm32-unknown-unknown into c_hello.wasm.
//
//   hello         input a name; output {"message":"Hello <name>"}
//   count_vowels  output {"count":N,"total":T,"vowels":"..."}; vowels from
//                 config `vowels` (default aeiouAEIOU), running total in var
//                 `total` (a decimal string); logs the count at info level
//   fetch         input a URL; GETs it (the host's allowed hosts apply), logs
//                 the status at info level and outputs the response body
//
// Input and output stay in Extism memory, read and written a chunk at a time,
// so no allocator is needed in the module.

#define EXTISM_IMPLEMENTATION
#include "extism-pdk.h"

#define CHUNK 512

// Output under construction in an Extism memory block whose size is fixed
// up front (exact, or an upper bound); `length` bytes written so far.
typedef struct {
  ExtismHandle handle;
  uint64_t length;
  char pending[CHUNK];
  size_t buffered;
} Output;

static void output_flush(Output *out) {
  extism_store_to_handle(out->handle, out->length, out->pending, out->buffered);
  out->length += out->buffered;
  out->buffered = 0;
}

static void output_byte(Output *out, char c) {
  if (out->buffered == CHUNK) {
    output_flush(out);
  }
  out->pending[out->buffered++] = c;
}

static void output_text(Output *out, const char *s) {
  for (; *s; s++) {
    output_byte(out, *s);
  }
}

// Writes n in decimal at dst (up to 20 bytes); its length.
static size_t format_decimal(char *dst, uint64_t n) {
  char digits[20];
  size_t count = 0;
  do {
    digits[count++] = (char)('0' + n % 10);
    n /= 10;
  } while (n > 0);
  for (size_t i = 0; i < count; i++) {
    dst[i] = digits[count - 1 - i];
  }
  return count;
}

static size_t copy_text(char *dst, const char *s) {
  size_t n = 0;
  for (; s[n]; n++) {
    dst[n] = s[n];
  }
  return n;
}

static void output_decimal(Output *out, uint64_t n) {
  char digits[20];
  const size_t count = format_decimal(digits, n);
  for (size_t i = 0; i < count; i++) {
    output_byte(out, digits[i]);
  }
}

// One byte of a JSON string's contents, escaped as serde_json escapes it.
static void output_json_byte(Output *out, uint8_t c) {
  static const char hex[] = "0123456789abcdef";
  switch (c) {
  case '"':
    output_text(out, "\\\"");
    return;
  case '\\':
    output_text(out, "\\\\");
    return;
  case '\n':
    output_text(out, "\\n");
    return;
  case '\r':
    output_text(out, "\\r");
    return;
  case '\t':
    output_text(out, "\\t");
    return;
  case '\b':
    output_text(out, "\\b");
    return;
  case '\f':
    output_text(out, "\\f");
    return;
  }
  if (c < 0x20) {
    output_text(out, "\\u00");
    output_byte(out, hex[c >> 4]);
    output_byte(out, hex[c & 15]);
    return;
  }
  output_byte(out, (char)c);
}

// Starts an output of at most `capacity` bytes.
static void output_start(Output *out, uint64_t capacity) {
  out->handle = extism_alloc(capacity);
  out->length = 0;
  out->buffered = 0;
}

static void output_finish(Output *out) {
  output_flush(out);
  extism_output_set_from_handle(out->handle, 0, out->length);
}

// How many bytes output_json_byte writes for c.
static size_t json_byte_size(uint8_t c) {
  switch (c) {
  case '"':
  case '\\':
  case '\n':
  case '\r':
  case '\t':
  case '\b':
  case '\f':
    return 2;
  }
  return c < 0x20 ? 6 : 1;
}

// Escapes the input as the contents of a JSON string into `out`, or, when
// `out` is NULL, adds the escaped size to `*size`. False if the input cannot
// be read.
static bool escape_input(Output *out, uint64_t *size) {
  const uint64_t length = extism_input_length();
  uint8_t chunk[CHUNK];
  for (uint64_t at = 0; at < length; at += CHUNK) {
    const size_t n = length - at < CHUNK ? (size_t)(length - at) : CHUNK;
    if (!extism_load_input(at, chunk, n)) {
      return false;
    }
    for (size_t i = 0; i < n; i++) {
      if (out) {
        output_json_byte(out, chunk[i]);
      } else {
        *size += json_byte_size(chunk[i]);
      }
    }
  }
  return true;
}

int32_t EXTISM_EXPORTED_FUNCTION(hello) {
  static const char prefix[] = "{\"message\":\"Hello ";
  static const char suffix[] = "\"}";
  uint64_t size = (sizeof prefix - 1) + (sizeof suffix - 1);
  Output out;
  if (!escape_input(NULL, &size)) {
    extism_error_set_buf_from_sz("hello: cannot read the input");
    return 1;
  }
  output_start(&out, size);
  output_text(&out, prefix);
  escape_input(&out, NULL);
  output_text(&out, suffix);
  output_finish(&out);
  return 0;
}

// Decodes UTF-8 a byte at a time; a code point is complete when it returns 1.
typedef struct {
  uint32_t code_point;
  int needed;
} Utf8;

static int utf8_push(Utf8 *d, uint8_t byte) {
  if (d->needed > 0 && (byte & 0xC0) == 0x80) {
    d->code_point = (d->code_point << 6) | (byte & 0x3F);
    return --d->needed == 0;
  }
  if (byte < 0x80) {
    d->code_point = byte;
    d->needed = 0;
    return 1;
  }
  if ((byte & 0xE0) == 0xC0) {
    d->code_point = byte & 0x1F;
    d->needed = 1;
  } else if ((byte & 0xF0) == 0xE0) {
    d->code_point = byte & 0x0F;
    d->needed = 2;
  } else {
    d->code_point = byte & 0x07;
    d->needed = 3;
  }
  return 0;
}

#define MAX_VOWELS 256

int32_t EXTISM_EXPORTED_FUNCTION(count_vowels) {
  // The vowel set, as bytes (for the output) and as code points.
  static const char default_vowels[] = "aeiouAEIOU";
  uint8_t vowels[MAX_VOWELS];
  size_t vowels_length = sizeof default_vowels - 1;
  const ExtismHandle configured = extism_config_get_buf_from_sz("vowels");
  if (configured != 0) {
    const uint64_t n = extism_length(configured);
    if (n > MAX_VOWELS) {
      extism_error_set_buf_from_sz("count_vowels: config `vowels` is longer than 256 bytes");
      return 1;
    }
    extism_load_from_handle(configured, 0, vowels, (size_t)n);
    vowels_length = (size_t)n;
  } else {
    for (size_t i = 0; i < vowels_length; i++) {
      vowels[i] = (uint8_t)default_vowels[i];
    }
  }
  uint32_t vowel_set[MAX_VOWELS];
  size_t vowel_count = 0;
  Utf8 decoder = {0, 0};
  for (size_t i = 0; i < vowels_length; i++) {
    if (utf8_push(&decoder, vowels[i])) {
      vowel_set[vowel_count++] = decoder.code_point;
    }
  }

  const uint64_t length = extism_input_length();
  uint64_t count = 0;
  uint8_t chunk[CHUNK];
  decoder.needed = 0;
  for (uint64_t at = 0; at < length; at += CHUNK) {
    const size_t n = length - at < CHUNK ? (size_t)(length - at) : CHUNK;
    if (!extism_load_input(at, chunk, n)) {
      extism_error_set_buf_from_sz("count_vowels: cannot read the input");
      return 1;
    }
    for (size_t i = 0; i < n; i++) {
      if (!utf8_push(&decoder, chunk[i])) {
        continue;
      }
      for (size_t v = 0; v < vowel_count; v++) {
        if (vowel_set[v] == decoder.code_point) {
          count++;
          break;
        }
      }
    }
  }

  // The running total: var `total`, a decimal string.
  uint64_t total = count;
  const ExtismHandle previous = extism_var_get_buf_from_sz("total");
  if (previous != 0) {
    char digits[20];
    const uint64_t n = extism_length(previous);
    if (n <= sizeof digits && extism_load_from_handle(previous, 0, digits, (size_t)n)) {
      uint64_t value = 0;
      for (uint64_t i = 0; i < n && digits[i] >= '0' && digits[i] <= '9'; i++) {
        value = value * 10 + (uint64_t)(digits[i] - '0');
      }
      total += value;
    }
  }
  char total_text[20];
  const size_t total_length = format_decimal(total_text, total);
  extism_var_set_buf_from_sz("total", extism_alloc_buf(total_text, total_length));

  static const char middle[] = " vowels, total ";
  char line[sizeof "count_vowels: " + 20 + sizeof middle + 20];
  size_t at = 0;
  at += copy_text(line + at, "count_vowels: ");
  at += format_decimal(line + at, count);
  at += copy_text(line + at, middle);
  at += format_decimal(line + at, total);
  extism_log(line, at, ExtismLogInfo);

  Output out;
  // Two numbers of at most 20 digits, the vowels escaped, 31 bytes of JSON.
  output_start(&out, 71 + 6 * vowels_length);
  output_text(&out, "{\"count\":");
  output_decimal(&out, count);
  output_text(&out, ",\"total\":");
  output_decimal(&out, total);
  output_text(&out, ",\"vowels\":\"");
  for (size_t i = 0; i < vowels_length; i++) {
    output_json_byte(&out, vowels[i]);
  }
  output_text(&out, "\"}");
  output_finish(&out);
  return 0;
}

int32_t EXTISM_EXPORTED_FUNCTION(fetch) {
  // The request, {"url":"<input>","method":"GET"}, in a block of exactly its
  // size: the host parses the whole block.
  static const char prefix[] = "{\"url\":\"";
  static const char suffix[] = "\",\"method\":\"GET\"}";
  uint64_t size = (sizeof prefix - 1) + (sizeof suffix - 1);
  if (!escape_input(NULL, &size)) {
    extism_error_set_buf_from_sz("fetch: cannot read the input");
    return 1;
  }
  Output request;
  output_start(&request, size);
  output_text(&request, prefix);
  escape_input(&request, NULL);
  output_text(&request, suffix);
  output_flush(&request);

  const ExtismHandle response = extism_http_request(request.handle, 0);
  const int32_t status = extism_http_status_code();
  char line[sizeof "fetch: " + 20];
  size_t at = copy_text(line, "fetch: ");
  at += format_decimal(line + at, status < 0 ? 0 : (uint64_t)status);
  extism_log(line, at, ExtismLogInfo);
  if (response != 0) {
    extism_output_handle(response);
  }
  return 0;
}
