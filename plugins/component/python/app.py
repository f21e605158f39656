"""A wasi:http/proxy component in Python (componentize-py), exporting
wasi:http/incoming-handler. Its paths are those of
plugins/component/rust/http_handler, so one set of tests drives both."""

import os
from urllib.parse import parse_qs, urlsplit

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.imports import outgoing_handler
from wit_world.imports.streams import StreamError_Closed
from wit_world.imports.types import (
    Fields,
    IncomingBody,
    Method_Get,
    Method_Post,
    OutgoingBody,
    OutgoingRequest,
    OutgoingResponse,
    ResponseOutparam,
    Scheme_Http,
    Scheme_Https,
)

# OutputStream.blocking_write_and_flush takes at most 4096 bytes per call.
WRITE_CHUNK = 4096
READ_CHUNK = 64 * 1024

# Counts GET /state calls; a fresh instance per request keeps it at 1.
state = 0


def start(response_out, status):
    """Sends the response head; returns its body."""
    response = OutgoingResponse(Fields.from_list([("content-type", b"text/plain")]))
    response.set_status_code(status)
    body = response.body()
    ResponseOutparam.set(response_out, Ok(response))
    return body


def write(stream, data):
    for i in range(0, len(data), WRITE_CHUNK):
        stream.blocking_write_and_flush(data[i : i + WRITE_CHUNK])


def respond(response_out, status, data):
    body = start(response_out, status)
    with body.write() as stream:
        write(stream, data)
    OutgoingBody.finish(body, None)


def copy(incoming, stream):
    """Copies an incoming body into stream chunk by chunk, then finishes it."""
    with incoming.stream() as source:
        while True:
            try:
                chunk = source.blocking_read(READ_CHUNK)
            except Err as e:
                if isinstance(e.value, StreamError_Closed):
                    break
                raise
            write(stream, chunk)
    IncomingBody.finish(incoming)


def echo(request, response_out):
    incoming = request.consume()
    body = start(response_out, 200)
    with body.write() as stream:
        copy(incoming, stream)
    OutgoingBody.finish(body, None)


def fetch(url, response_out):
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return respond(response_out, 400, b"bad url")
    request = OutgoingRequest(Fields())
    request.set_method(Method_Get())
    request.set_scheme(Scheme_Http() if parts.scheme == "http" else Scheme_Https())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + ("?" + parts.query if parts.query else ""))
    try:
        future = outgoing_handler.handle(request, None)
    except Err as e:
        return respond(response_out, 502, f"outgoing error: {e.value!r}".encode())
    with future.subscribe() as ready:
        ready.block()
    result = future.get()
    # option<result<result<incoming-response, error-code>>>: ready, got once.
    assert result is not None and isinstance(result, Ok)
    if isinstance(result.value, Err):
        return respond(response_out, 502, f"outgoing error: {result.value.value!r}".encode())
    upstream = result.value.value
    incoming = upstream.consume()
    body = start(response_out, 200)
    with body.write() as stream:
        write(stream, f"upstream {upstream.status()}\n".encode())
        copy(incoming, stream)
    OutgoingBody.finish(body, None)


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request, response_out):
        global state
        method = request.method()
        parts = urlsplit(request.path_with_query() or "/")
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        get = isinstance(method, Method_Get)
        path = parts.path
        if get and path == "/":
            respond(response_out, 200, b"hello from python component")
        elif isinstance(method, Method_Post) and path == "/echo":
            echo(request, response_out)
        elif get and path == "/fetch":
            fetch(query.get("url"), response_out)
        elif get and path == "/trap":
            # An uncaught exception: componentize-py prints it and traps.
            raise RuntimeError("trap requested")
        elif get and path == "/loop":
            n = 0
            while True:
                n += 1
        elif get and path == "/grow":
            keep = []
            while True:
                # Kept alive in `keep`, so memory only grows.
                keep.append(bytearray(1 << 20))
        elif get and path == "/state":
            state += 1
            respond(response_out, 200, str(state).encode())
        elif get and path == "/header":
            values = request.headers().get(query.get("name", ""))
            if values:
                respond(response_out, 200, values[0])
            else:
                respond(response_out, 404, b"not set")
        elif get and path == "/env":
            value = os.environ.get(query.get("name", ""))
            if value is None:
                respond(response_out, 404, b"not set")
            else:
                respond(response_out, 200, value.encode())
        elif get and path == "/file":
            try:
                with open(query.get("path", ""), "rb") as f:
                    data = f.read()
            except FileNotFoundError as e:
                respond(response_out, 404, str(e).encode())
            except OSError as e:
                respond(response_out, 500, str(e).encode())
            else:
                respond(response_out, 200, data)
        else:
            respond(response_out, 404, b"not found")
