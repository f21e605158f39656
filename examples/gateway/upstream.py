#!/usr/bin/env python3
"""The demo gateway's upstream (`make demo-gateway`): answers every request
with what it received, as JSON (method, path, headers, body), so the headers
the filters add on the way in are visible. Standard library only.
Usage: upstream.py [PORT] (default 9000), on 127.0.0.1."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("content-length") or 0)
        headers = {}
        for name, value in self.headers.items():  # repeated names joined, as HTTP allows
            headers[name.lower()] = headers[name.lower()] + ", " + value if name.lower() in headers else value
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        reply = json.dumps(
            {
                "upstream": "demo upstream on 127.0.0.1:%d" % self.server.server_port,
                "method": self.command,
                "path": self.path,
                "headers": headers,
                "body": body,
            },
            indent=2,
        ).encode() + b"\n"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    ThreadingHTTPServer(("127.0.0.1", port), Echo).serve_forever()
