#!/usr/bin/env python3
"""Both ends of gRPC, with Python's `grpcio`, for crates/cli/tests/e2e/protocols.rs
and bench/protocols.py. Messages are raw bytes (no .proto: generic handlers),
so nothing is generated at build time.

  grpc_peer.py serve PORT [CERT KEY]
      A server on 127.0.0.1:PORT ($PEER_HOST:PORT when set), plain HTTP/2 (h2c) or TLS with CERT and KEY
      (ALPN h2); prints `ready` once listening. Service `test.Echo`:
      Unary         the request back; `fail` aborts with INVALID_ARGUMENT
                    and message `told to fail`; `sleep:MS` answers after MS;
                    `metadata` answers the call's metadata as JSON. Every
                    answer carries trailing metadata `x-trailer: yes`.
      ServerStream  `N` answers N messages `0`..`N-1`.
      ClientStream  the number of messages and bytes received, as JSON.
      Bidi          every message back as it comes (ping-pong).
      Greet         a bidi stream where the server speaks first: `hello`
                    before it reads anything, then every message back.

  grpc_peer.py client TARGET SCENARIO [ARG] [authority=HOST] [ca=CA_FILE]
      Calls through TARGET (host:port), with HOST as the calls' authority
      (what routes match), over TLS trusting CA_FILE when given; prints one
      JSON object; exits 1 when a check fails.
      all        the four call kinds, a stream the server opens (Greet),
                 a status with its message, trailing metadata, metadata
                 sent, a client deadline;
      status     one unary call: the code and message the client got (used
                 for the gateway's own answers: no route, upstream down, ...);
      deadline MS  a unary call that sleeps longer than its timeout of MS;
      hold SECS  a bidi stream: a ping-pong, then `open` on stdout, SECS of
                 silence (the test reloads the gateway meanwhile), another
                 ping-pong on the same stream, and its end.
"""

import json
import os
import queue
import sys
import time
from concurrent import futures

import grpc

SERVICE = "test.Echo"


def serve(port, cert=None, key=None):
    def unary(request, context):
        context.set_trailing_metadata((("x-trailer", "yes"),))
        if request == b"fail":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "told to fail")
        if request.startswith(b"sleep:"):
            time.sleep(int(request[6:]) / 1000)
        if request == b"metadata":
            return json.dumps(dict(context.invocation_metadata())).encode()
        return request

    def server_stream(request, context):
        for i in range(int(request)):
            yield str(i).encode()

    def client_stream(requests, context):
        count = size = 0
        for message in requests:
            count += 1
            size += len(message)
        return json.dumps({"count": count, "bytes": size}).encode()

    def bidi(requests, context):
        for message in requests:
            yield message

    def greet(requests, context):
        yield b"hello"
        for message in requests:
            yield message

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Greet": grpc.stream_stream_rpc_method_handler(greet),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((handler,))
    address = f"{os.environ.get('PEER_HOST', '127.0.0.1')}:{port}"
    if cert:
        with open(cert, "rb") as c, open(key, "rb") as k:
            credentials = grpc.ssl_server_credentials(((k.read(), c.read()),))
        server.add_secure_port(address, credentials)
    else:
        server.add_insecure_port(address)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def channel(target, ca_file, authority):
    options = [("grpc.default_authority", authority)] if authority else []
    if ca_file:
        with open(ca_file, "rb") as f:
            credentials = grpc.ssl_channel_credentials(f.read())
        return grpc.secure_channel(target, credentials, options)
    return grpc.insecure_channel(target, options)


def bidi(call, timeout=10, method="Bidi"):
    """A bidi call fed from a queue (None ends it): the queue and the replies."""
    outgoing = queue.Queue()

    def messages():
        while (m := outgoing.get()) is not None:
            yield m
    return outgoing, call("stream_stream", method)(messages(), timeout=timeout)


def client(target, scenario, rest):
    authority = next((a.split("=", 1)[1] for a in rest if a.startswith("authority=")), None)
    ca_file = next((a.split("=", 1)[1] for a in rest if a.startswith("ca=")), None)
    rest = [a for a in rest if "=" not in a]
    ch = channel(target, ca_file, authority)
    call = lambda kind, method: getattr(ch, kind)(f"/{SERVICE}/{method}")  # noqa: E731
    result, failed = {"scenario": scenario}, []
    if scenario == "all":
        answer, state = call("unary_unary", "Unary").with_call(b"hello", timeout=10)
        result["unary"] = answer.decode()
        result["trailers"] = dict(state.trailing_metadata())
        answer = call("unary_unary", "Unary")(b"metadata", timeout=10,
                                                 metadata=(("x-caller", "test"),))
        result["metadata_seen"] = json.loads(answer)
        result["server_stream"] = [m.decode() for m in
                                   call("unary_stream", "ServerStream")(b"5", timeout=10)]
        answer = call("stream_unary", "ClientStream")(iter([b"a" * 100] * 50), timeout=10)
        result["client_stream"] = json.loads(answer)
        # Ping-pong: each answer read before the next message is sent.
        outgoing, replies = bidi(call)
        pongs = []
        for i in range(5):
            outgoing.put(f"ping {i}".encode())
            pongs.append(next(replies).decode())
        outgoing.put(None)
        result["bidi"] = pongs
        # The server speaks first: its greeting must come before the client
        # has sent anything (a gateway that waits for the request's first
        # message to open the upstream request hangs here until the deadline).
        outgoing, replies = bidi(call, timeout=5, method="Greet")
        try:
            greeting = [next(replies).decode()]
            outgoing.put(b"and you")
            greeting.append(next(replies).decode())
            outgoing.put(None)
            greeting += [m.decode() for m in replies]
        except grpc.RpcError as e:
            outgoing.put(None)
            greeting = [e.code().name]
        result["server_first"] = greeting
        try:
            call("unary_unary", "Unary")(b"fail", timeout=10)
            failed.append("fail did not fail")
        except grpc.RpcError as e:
            result["fail"] = [e.code().name, e.details()]
        failed += [name for name, ok in [
            ("unary", result["unary"] == "hello"),
            ("trailers", result["trailers"].get("x-trailer") == "yes"),
            ("metadata", result["metadata_seen"].get("x-caller") == "test"),
            ("server_stream", result["server_stream"] == ["0", "1", "2", "3", "4"]),
            ("client_stream", result["client_stream"] == {"count": 50, "bytes": 5000}),
            ("bidi", pongs == [f"ping {i}" for i in range(5)]),
            ("server_first", greeting == ["hello", "and you"]),
            ("fail", result.get("fail") == ["INVALID_ARGUMENT", "told to fail"]),
        ] if not ok]
    elif scenario in ("status", "deadline"):
        request, timeout = b"hello", 10
        if scenario == "deadline":
            timeout = int(rest[0]) / 1000
            request = f"sleep:{int(rest[0]) * 5}".encode()
        started = time.monotonic()
        try:
            result["answer"] = call("unary_unary", "Unary")(request, timeout=timeout).decode()
            result["code"] = "OK"
        except grpc.RpcError as e:
            result["code"], result["message"] = e.code().name, e.details()
        result["seconds"] = round(time.monotonic() - started, 3)
    elif scenario == "hold":
        outgoing, replies = bidi(call, timeout=float(rest[0]) + 10)
        outgoing.put(b"before")
        result["before"] = next(replies).decode()
        print("open", flush=True)
        time.sleep(float(rest[0]))
        outgoing.put(b"after")
        result["after"] = next(replies).decode()
        outgoing.put(None)
        result["rest"] = [m.decode() for m in replies]
        failed += [name for name, ok in [
            ("before", result["before"] == "before"),
            ("after", result["after"] == "after"),
            ("end", result["rest"] == []),
        ] if not ok]
    else:
        sys.exit(f"unknown scenario {scenario}")
    result["failed"] = failed
    return result


def main():
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), *sys.argv[3:5])
        return
    result = client(sys.argv[2], sys.argv[3], sys.argv[4:])
    print(json.dumps(result), flush=True)
    sys.exit(1 if result["failed"] else 0)


if __name__ == "__main__":
    main()
