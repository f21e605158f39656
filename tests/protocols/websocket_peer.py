#!/usr/bin/env python3
"""Both ends of a WebSocket, with Python's `websockets` library, for
crates/cli/tests/e2e/protocols.rs and bench/protocols.py.

  websocket_peer.py serve PORT
      An upstream on 127.0.0.1:PORT; prints `ready` once listening. By the
      path's end (routes may forward it under a prefix):
      /echo        every message back as it came (text as text, binary as
                   binary);
      /headers     one text message: the upgrade request's headers as JSON;
      /close/CODE  after the first message, closes with CODE and reason `bye`.

  websocket_peer.py client URL SCENARIO [HEADER=VALUE ...]
      Runs SCENARIO against URL (through the gateway) and prints one JSON
      object of what it saw; exits 1 when a check fails.
      echo        text, binary, 1 MiB binary, a ping and its pong, 100
                  messages in a row, then a normal close (1000);
      headers     the upstream's view of the request's headers;
      refused     the handshake: the status the client got instead of 101;
      close CODE  the upstream's close code and reason reach the client;
      hold SECS   opens, echoes once, then waits SECS (the test reloads the
                  gateway meanwhile), echoes again, closes;
      idle SECS   opens and stays silent; how long until the tunnel closed.
"""

import asyncio
import json
import os
import sys
import time

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed, InvalidStatus

MIB = 1024 * 1024


async def upstream(port):
    async def handler(ws):
        path = ws.request.path
        if path.endswith("/headers"):
            await ws.send(json.dumps({k.lower(): v for k, v in ws.request.headers.raw_items()}))
            await ws.wait_closed()
        elif "/close/" in path:
            await ws.recv()
            await ws.close(int(path.rsplit("/", 1)[1]), "bye")
        else:
            async for message in ws:
                await ws.send(message)

    async with serve(handler, "127.0.0.1", port, max_size=4 * MIB, compression=None):
        print("ready", flush=True)
        await asyncio.Future()


def check(result, name, ok):
    result.setdefault("failed", [])
    if not ok:
        result["failed"].append(name)


async def client(url, scenario, args, headers):
    result = {"scenario": scenario}
    options = dict(additional_headers=headers, max_size=4 * MIB, compression=None,
                   ping_interval=None, open_timeout=10)
    if scenario == "refused":
        try:
            async with connect(url, **options):
                result["status"] = 101
        except InvalidStatus as e:
            result["status"] = e.response.status_code
            result["body"] = e.response.body.decode(errors="replace")
        return result
    async with connect(url, **options) as ws:
        if scenario == "echo":
            await ws.send("hello")
            check(result, "text", await ws.recv() == "hello")
            await ws.send(b"\x00\x01\xff")
            check(result, "binary", await ws.recv() == b"\x00\x01\xff")
            big = os.urandom(MIB)
            await ws.send(big)
            check(result, "1 MiB", await ws.recv() == big)
            pong = await ws.ping(b"are you there")
            result["pong_ms"] = round(await asyncio.wait_for(pong, 5) * 1000, 3)
            for i in range(100):
                await ws.send(f"message {i}")
            got = [await ws.recv() for _ in range(100)]
            check(result, "100 in order", got == [f"message {i}" for i in range(100)])
            await ws.close(1000, "done")
            result["close_code"] = ws.close_code
        elif scenario == "headers":
            result["headers"] = json.loads(await ws.recv())
        elif scenario == "close":
            await ws.send("please close")
            try:
                await ws.recv()
                check(result, "closed", False)
            except ConnectionClosed as e:
                result["close_code"] = e.rcvd.code if e.rcvd else None
                result["close_reason"] = e.rcvd.reason if e.rcvd else None
        elif scenario == "hold":
            await ws.send("before")
            check(result, "before", await ws.recv() == "before")
            print("open", flush=True)
            await asyncio.sleep(float(args[0]))
            await ws.send("after")
            check(result, "after", await ws.recv() == "after")
            await ws.close(1000)
        elif scenario == "idle":
            started = time.monotonic()
            try:
                await asyncio.wait_for(ws.recv(), float(args[0]) + 10)
            except ConnectionClosed:
                pass
            result["closed_after_s"] = round(time.monotonic() - started, 3)
        else:
            sys.exit(f"unknown scenario {scenario}")
    return result


def main():
    if sys.argv[1] == "serve":
        asyncio.run(upstream(int(sys.argv[2])))
        return
    url, scenario = sys.argv[2], sys.argv[3]
    rest = sys.argv[4:]
    args = [a for a in rest if "=" not in a]
    headers = [tuple(a.split("=", 1)) for a in rest if "=" in a]
    result = asyncio.run(client(url, scenario, args, headers))
    print(json.dumps(result), flush=True)
    sys.exit(1 if result.get("failed") else 0)


if __name__ == "__main__":
    main()
