#!/usr/bin/env python3
"""The web dashboard (docs/dashboard.md) in a real browser: Debian's Chromium,
driven by Playwright for Python, against real `wasmgate run` processes with
real traffic through a real upstream. Run by `make test`.

Checks: every page loads; the overview's request counts are the ones
/metrics reports; a route matching `/<script>...` shows it as text and runs
nothing; a route and a plugin named `constructor` show like any other, and
names with spaces or markup are refused with the reason (names follow one
rule, docs/gateway.md);
a route added through the edit form is served by the gateway; an invalid
change shows the gateway's reason next to the editor and changes nothing; a
plugin's last crash shows its stack; a CPU profile's flame graph appears in
the page; with an admin token, the page asks for it, refuses a wrong one and
works with the right one; a plugin pulled from an OCI registry (a real one,
built by scripts/install-deps.sh) shows the image it runs, pinned to its
digest.

DASHBOARD_SCREENSHOTS=docs/img saves docs/img/dashboard-*.png (the
screenshots of docs/dashboard.md); otherwise they go to a temporary directory.
"""

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from playwright.sync_api import sync_playwright
from websockets.sync.client import connect as websocket_connect
from websockets.sync.server import serve as websocket_serve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
WASM = os.path.join(ROOT, "target/wasm")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SHOTS = os.environ.get("DASHBOARD_SCREENSHOTS") or tempfile.mkdtemp(prefix="wasmgate-dashboard-")
XSS_PREFIX = "/<script>alert('x')</script>"
HOSTILE_NAMES = ["auth v2", "\"><script>alert(1)</script>", "__proto__"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from upstream"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def make_certificate(directory, name, days):
    """A self-signed ECDSA certificate for `name`.example valid for `days`."""
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", str(days), "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:P-256", "-subj", f"/CN={name}.example",
                    "-addext", f"subjectAltName=DNS:{name}.example",
                    "-keyout", f"{directory}/{name}.key", "-out", f"{directory}/{name}.pem"],
                   check=True, capture_output=True)
    return f"{{name: {name}, cert: {directory}/{name}.pem, key: {directory}/{name}.key}}"


def not_after(pem):
    """The certificate's expiry date (YYYY-MM-DD, UTC), read by openssl."""
    out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-dateopt", "iso_8601", "-in", pem],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1][:10]


def start_upstream():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_websocket_upstream():
    """A WebSocket server echoing every message, on a free port."""
    def echo(ws):
        for message in ws:
            ws.send(message)
    server = websocket_serve(echo, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Gateway:
    """A `wasmgate run` on free ports with `config` (listen/admin added)."""

    def __init__(self, config):
        self.port, self.admin = free_port(), free_port()
        self.dir = tempfile.mkdtemp(prefix="wasmgate-dashboard-gw-")
        path = os.path.join(self.dir, "wasmgate.yaml")
        with open(path, "w") as f:
            f.write(f'listen: "127.0.0.1:{self.port}"\nadmin: "127.0.0.1:{self.admin}"\n{config}')
        self.log = open(os.path.join(self.dir, "gateway.log"), "w")
        self.proc = subprocess.Popen([WASMGATE, "run", "-c", path, "--no-watch"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            try:
                urllib.request.urlopen(self.admin_url("/healthz"), timeout=1)
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the gateway did not start:\n" + self.read_log())
                time.sleep(0.05)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def admin_url(self, path):
        return f"http://127.0.0.1:{self.admin}{path}"

    def get(self, path, method="GET", headers=None):
        request = urllib.request.Request(self.url(path), method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def admin_get(self, path, headers=None):
        request = urllib.request.Request(self.admin_url(path), headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def read_log(self):
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def route_requests(gateway, route):
    """The route's requests as /metrics counts them."""
    _, text = gateway.admin_get("/metrics")
    total = 0
    for line in text.splitlines():
        if line.startswith("wasmgate_route_requests_total{") and f'route="{route}"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.playwright = sync_playwright().start()
        cls.browser = cls.playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        cls.upstream = start_upstream()
        cls.websocket_upstream = start_websocket_upstream()

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls.playwright.stop()
        cls.upstream.shutdown()
        cls.websocket_upstream.shutdown()

    def new_page(self):
        page = self.browser.new_page(viewport={"width": 1280, "height": 900})
        self.dialogs = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        # Uncaught exceptions in the page's script. (Console errors are not
        # used: the browser logs every 4xx answer there, and some are the
        # point of a test.)
        self.page_errors = []
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        return page

    def open(self, page, gateway, name):
        page.goto(gateway.admin_url(f"/#{name}"))
        page.wait_for_selector(f'body[data-loaded="{name}"]', timeout=10000)

    def test_pages_edit_errors_crash_and_profile(self):
        certificates = tempfile.mkdtemp(prefix="wasmgate-dashboard-certs-")
        soon = make_certificate(certificates, "soon", 10)
        soon_pem = os.path.join(certificates, "soon.pem")
        later = make_certificate(certificates, "later", 90)
        gw = Gateway(f"""
admin_writes: true
listeners:
  - {{address: "127.0.0.1:{free_port()}", tls: {{certificates: [soon, later]}}}}
certificates: [{soon}, {later}]
upstreams:
  - {{name: backend, nodes: [{{address: "127.0.0.1:{self.upstream.server_port}"}}]}}
  - {{name: chat, nodes: [{{address: "127.0.0.1:{self.websocket_upstream.socket.getsockname()[1]}"}}]}}
plugins:
  - {{name: tag, wasm: "{WASM}/add_header.wasm"}}
  - {{name: constructor, wasm: "{WASM}/add_header.wasm"}}
  - {{name: faults, wasm: "{WASM}/faults.wasm"}}
  - {{name: handler, wasm: "{WASM}/component_rust.wasm"}}
routes:
  - {{name: api, path: {{prefix: /api}}, plugins: [{{plugin: tag, conf: dashboard}}], upstream: backend}}
  - {{name: app, path: {{prefix: /trap}}, component: {{plugin: handler}}}}
  - {{name: xss, path: {{prefix: "{XSS_PREFIX}"}}, respond: {{status: 200, body: x}}}}
  - {{name: constructor, path: {{prefix: /constructor}}, plugins: [{{plugin: constructor}}], respond: {{status: 200, body: c}}}}
  - {{name: functions, path: {{prefix: /f/}}, function: {{plugin: faults}}}}
  - {{name: chat, path: {{prefix: /chat}}, upstream: chat}}
  - {{name: shadowed, path: {{prefix: /v2}}, query: {{tier: gold}}, query_regex: {{id: "[0-9]+"}}, header_regex: {{x-tier: "gold|silver"}}, ports: [8443], cors: {{allow_origins: ["https://*.example.com"]}}, rewrite: {{replace_prefix: {{from: /v2, to: /api}}}}, upstream: backend, mirror: [{{upstream: chat, percent: 10}}]}}
""")
        try:
            for _ in range(30):
                self.assertEqual(gw.get("/api"), (200, "hello from upstream"))
            for _ in range(4):
                self.assertEqual(gw.get("/constructor"), (200, "c"))
            status, body = gw.get("/f/trap", method="POST")
            self.assertEqual(status, 500)
            trap_request = json.loads(body)["error"]["request_id"]
            status, _ = gw.get("/trap")  # the component's own trap
            self.assertEqual(status, 500)
            page = self.new_page()

            # Overview, with traffic flowing: the live chart shows it.
            self.open(page, gw, "overview")
            stop = threading.Event()

            def traffic():
                while not stop.is_set():
                    gw.get("/api")
                    time.sleep(0.005)
            load = threading.Thread(target=traffic)
            load.start()
            try:
                # A chart line above zero: its top label (the scale) > 0.
                page.wait_for_function(
                    "() => [...document.querySelectorAll('#chart-rps text')]"
                    ".some(t => parseFloat(t.textContent) > 0)", timeout=15000)
                page.wait_for_function(
                    "() => document.getElementById('chart-p50').querySelectorAll('path[stroke]').length >= 1")
            finally:
                stop.set()
                load.join()
            # Once traffic stops, the counts shown are /metrics' counts.
            expected = route_requests(gw, "api")
            self.assertGreater(expected, 30)
            page.wait_for_function(
                "n => { const r = document.querySelector('#route-totals tr[data-route=\"api\"]');"
                " return r && r.children[1].textContent === String(n); }", arg=expected, timeout=10000)
            api_row = page.locator('#route-totals tr[data-route="api"] td')
            self.assertEqual(int(api_row.nth(2).text_content()), expected)  # all 2xx
            functions_5xx = page.locator('#route-totals tr[data-route="functions"] td').nth(4)
            self.assertEqual(functions_5xx.text_content(), "1")
            self.assertIn("generation", page.locator("#facts").text_content())
            # A route named like what every object inherits counts as any other.
            constructor = page.locator('#route-totals tr[data-route="constructor"] td')
            self.assertEqual(constructor.nth(1).text_content(), "4")
            self.assertEqual(page.evaluate("document.scripts.length"), 1)
            self.assertEqual(self.dialogs, [])
            page.screenshot(path=os.path.join(SHOTS, "dashboard-overview.png"), full_page=True)

            # Routes and upstreams, with a WebSocket open through `chat`.
            websocket = websocket_connect(f"ws://127.0.0.1:{gw.port}/chat", open_timeout=10)
            websocket.send("hi")
            self.assertEqual(websocket.recv(timeout=10), "hi")
            self.open(page, gw, "routes")
            chat = page.locator('#routes-table tr[data-route="chat"] td')
            self.assertEqual(chat.nth(4).text_content(), "1 open / 1")
            self.assertEqual(page.locator('#routes-table tr[data-route="api"] td').nth(4).text_content(), "-")
            websocket.close()
            api = page.locator('#routes-table tr[data-route="api"]').text_content()
            self.assertIn("tag \"dashboard\"", api)
            self.assertIn("upstream backend", api)
            self.assertIn("component handler", page.locator('#routes-table tr[data-route="app"]').text_content())
            shadowed = page.locator('#routes-table tr[data-route="shadowed"]').text_content()
            self.assertIn("x-tier ~ gold|silver; ?tier=gold&id~[0-9]+", shadowed)
            self.assertIn("; port 8443; CORS from https://*.example.com", shadowed)
            self.assertIn("upstream backend; rewrite /v2* → /api*; mirror chat 10%", shadowed)
            upstream_row = page.locator("#upstreams-table tbody tr").first.text_content()
            self.assertIn(f"127.0.0.1:{self.upstream.server_port}", upstream_row)
            self.assertEqual(page.locator("#upstreams-table tbody tr").first.locator("td").nth(2).text_content(), "http1")
            # The <script> in a route's match: shown as its characters, nothing ran.
            xss = page.locator('#routes-table tr[data-route="xss"]').text_content()
            self.assertIn(XSS_PREFIX, xss)
            self.assertEqual(page.evaluate("document.scripts.length"), 1)
            # Listeners and certificates: the one expiring within 14 days is marked.
            listeners = page.locator("#listeners-table").text_content()
            self.assertIn(f"127.0.0.1:{gw.port}", listeners)
            self.assertIn("HTTPS", listeners)
            soon_row = page.locator('#certificates-table tr[data-certificate="soon"]')
            self.assertIn("soon.example", soon_row.text_content())
            self.assertIn(soon_row.locator("td").nth(4).text_content(), ("9", "10"))
            # Its expiry date, as openssl wrote it into the certificate.
            self.assertEqual(soon_row.locator("td").nth(3).text_content(), not_after(soon_pem))
            self.assertIn("warn", soon_row.get_attribute("class"))
            later_row = page.locator('#certificates-table tr[data-certificate="later"]')
            self.assertIn("later.example", later_row.text_content())
            self.assertNotIn("warn", later_row.get_attribute("class") or "")
            page.screenshot(path=os.path.join(SHOTS, "dashboard-routes.png"), full_page=True)

            # Plugins: the crash's stack, then a profile of live traffic.
            self.open(page, gw, "plugins")
            faults = page.locator('#plugins-table tr[data-plugin="faults"] td')
            self.assertEqual(faults.nth(5).text_content(), "1")  # traps
            calls = page.locator('#plugins-table tr[data-plugin="constructor"] td').nth(3)
            self.assertGreaterEqual(int(calls.text_content()), 4)
            faults.last.locator("button").click()
            crash = page.locator("#plugin-crash").text_content()
            self.assertIn("trap", crash)
            # The id the client's error answer gave finds the report here.
            self.assertIn(f"(request {trap_request})", crash)
            self.assertIn("explode_on_purpose", crash)
            self.assertRegex(crash, r"\.rs:\d+")
            # A wasi:http component is a plugin like the others: its kind,
            # its trap, its crash report with the guest's source line.
            handler = page.locator('#plugins-table tr[data-plugin="handler"] td')
            self.assertIn("component", handler.nth(1).text_content())
            self.assertEqual(handler.nth(5).text_content(), "1")  # traps
            handler.last.locator("button").click()
            page.wait_for_function(
                "() => document.getElementById('plugin-crash').textContent.includes('http_handler')")
            self.assertRegex(page.locator("#plugin-crash").text_content(), r"http_handler/src/lib\.rs:\d+")
            # One plugin's status that cannot be read (the browser is made to
            # fail that call) leaves the others in the table.
            failing = "**/plugins/tag/status"
            page.route(failing, lambda route: route.fulfill(
                status=503, content_type="application/json", body='{"error": "made to fail"}'))
            self.open(page, gw, "routes")
            self.open(page, gw, "plugins")
            self.assertIn("status unavailable", page.locator('#plugins-table tr[data-plugin="tag"]').text_content())
            faults = page.locator('#plugins-table tr[data-plugin="faults"] td')
            self.assertEqual(faults.nth(5).text_content(), "1")  # traps
            page.unroute(failing)
            self.open(page, gw, "routes")
            self.open(page, gw, "plugins")
            page.locator('#plugins-table tr[data-plugin="tag"] button').click()
            stop = threading.Event()

            def traffic():
                while not stop.is_set():
                    gw.get("/api")
            load = threading.Thread(target=traffic)
            load.start()
            try:
                page.click("#profile-button")
                page.wait_for_selector("#flamegraph:not([hidden])", timeout=15000)
                page.wait_for_function("() => document.getElementById('flamegraph').naturalWidth > 0")
            finally:
                stop.set()
                load.join()
            self.assertEqual(page.locator("#profile-status").text_content(), "done")
            page.screenshot(path=os.path.join(SHOTS, "dashboard-plugins.png"), full_page=True)

            # Edit: a new route through the form, served at once.
            self.open(page, gw, "edit")
            page.select_option("#edit-kind", "routes")
            page.fill("#edit-name", "added")
            page.fill("#edit-body", json.dumps({"path": {"prefix": "/added"},
                                                "respond": {"status": 200, "body": "from-dashboard"}}))
            page.click("#edit-apply")
            page.wait_for_function("() => document.getElementById('edit-result').textContent.startsWith('applied')")
            self.assertEqual(gw.get("/added"), (200, "from-dashboard"))
            # The same in YAML, through "Load current" and a change. The
            # editor is emptied first: it still holds the JSON typed above,
            # and a wait on text it already shows would not wait for the
            # load, whose late answer could then overwrite the change.
            page.locator("#edit-body").clear()
            page.click("#edit-load")
            page.wait_for_function("() => document.getElementById('edit-body').value.includes('from-dashboard')")
            changed = "path: {prefix: /added}\nrespond: {status: 200, body: changed}\n"
            page.locator("#edit-body").clear()
            page.fill("#edit-body", changed)
            self.assertEqual(page.input_value("#edit-body"), changed)
            page.click("#edit-apply")
            page.wait_for_function("() => document.getElementById('edit-result').textContent.startsWith('applied')")
            self.assertEqual(gw.get("/added"), (200, "changed"), page.locator("#edit-result").text_content())
            # An invalid change: the gateway's reason next to the editor,
            # nothing applied.
            page.fill("#edit-name", "broken")
            page.fill("#edit-body", json.dumps({"path": {"prefix": "/broken"}, "upstream": "nowhere"}))
            page.click("#edit-apply")
            page.wait_for_function("() => document.getElementById('edit-error').textContent.length > 0")
            error = page.locator("#edit-error").text_content()
            self.assertIn("rejected", error)
            self.assertIn("nowhere", error)
            self.assertEqual(page.locator("#edit-result").text_content(), "")
            self.assertEqual(gw.get("/broken")[0], 404)
            self.assertEqual(gw.get("/added"), (200, "changed"))
            page.screenshot(path=os.path.join(SHOTS, "dashboard-edit.png"), full_page=True)
            # Names with spaces or markup: refused with the rule, shown as
            # text, nothing applied.
            for name in HOSTILE_NAMES:
                page.evaluate("() => { document.getElementById('edit-error').textContent = ''; }")
                page.fill("#edit-name", name)
                page.fill("#edit-body", json.dumps({"respond": {"status": 200, "body": "hostile"}}))
                page.click("#edit-apply")
                page.wait_for_function("() => document.getElementById('edit-error').textContent.length > 0")
                error = page.locator("#edit-error").text_content()
                self.assertIn("not a valid name", error, name)
            self.assertEqual(page.evaluate("document.scripts.length"), 1)
            _, routes = gw.admin_get("/routes")
            self.assertNotIn("hostile", routes)
            # Delete.
            page.fill("#edit-name", "added")
            page.click("#edit-delete")
            page.wait_for_function("() => document.getElementById('edit-result').textContent.startsWith('applied')")
            self.assertEqual(gw.get("/added")[0], 404)

            # Cluster: this node has none, and says so.
            self.open(page, gw, "cluster")
            self.assertIn("not part of a cluster", page.locator("#cluster-note").text_content())
            self.assertEqual(self.dialogs, [])
            self.assertEqual(self.page_errors, [])
        finally:
            gw.stop()

    def test_a_token_is_asked_for_once_and_kept_out_of_urls(self):
        token = "dashboard-test-token"
        gw = Gateway(f"""
admin_token: "{token}"
routes:
  - {{name: home, path: {{prefix: /}}, respond: {{status: 200, body: home}}}}
""")
        try:
            # The API refuses requests without the token; the page itself loads.
            self.assertEqual(gw.admin_get("/status")[0], 401)
            page = self.new_page()
            page.goto(gw.admin_url("/"))
            page.wait_for_selector("#login:not([hidden])")
            page.fill("#token", "wrong")
            page.click("#login-form button")
            page.wait_for_function("() => document.getElementById('login-error').textContent.includes('refused')")
            page.screenshot(path=os.path.join(SHOTS, "dashboard-login.png"))
            page.fill("#token", token)
            page.click("#login-form button")
            page.wait_for_selector('body[data-loaded="overview"]')
            self.assertNotIn(token, page.url)
            self.assertEqual(page.evaluate("sessionStorage.getItem('wasmgate-admin-token')"), token)
            # Another page of the same tab needs no new sign-in.
            self.open(page, gw, "routes")
            self.assertIn("home", page.locator("#routes-table").text_content())
            # "Forget token" returns to the sign-in.
            page.click("#logout")
            page.wait_for_selector("#login:not([hidden])")
            self.assertIsNone(page.evaluate("sessionStorage.getItem('wasmgate-admin-token')"))
            # The token never reached the gateway's log.
            self.assertNotIn(token, gw.read_log())
            self.assertEqual(self.page_errors, [])
        finally:
            gw.stop()

    def test_the_cluster_page_lists_the_nodes_and_their_revisions(self):
        etcd_dir = tempfile.mkdtemp(prefix="wasmgate-dashboard-etcd-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        etcd = subprocess.Popen(["etcd", "--name", "ui", "--data-dir", etcd_dir, "--listen-client-urls", client,
                                 "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                 "--initial-advertise-peer-urls", peer, "--initial-cluster", f"ui={peer}",
                                 "--log-level", "error", "--logger", "zap"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        nodes = []
        try:
            deadline = time.time() + 20
            while True:
                try:
                    urllib.request.urlopen(client + "/health", timeout=1)
                    break
                except OSError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.1)
            pushed = os.path.join(etcd_dir, "cluster.yaml")
            with open(pushed, "w") as f:
                f.write("routes:\n  - {name: home, path: {prefix: /}, respond: {status: 200, body: home}}\n")
            subprocess.run([WASMGATE, "config", "push", "-c", pushed, "--etcd", client], check=True,
                           stdout=subprocess.DEVNULL)
            # node-a's TLS listener names a certificate nobody has written yet.
            waiting = f"127.0.0.1:{free_port()}"
            nodes.append(Gateway(f'config: {{etcd: ["{client}"], node_name: node-a}}\n'
                                 f'listeners: [{{address: "{waiting}", tls: {{certificates: [shop]}}}}]\n'))
            nodes.append(Gateway(f'config: {{etcd: ["{client}"], node_name: node-b}}\n'))
            page = self.new_page()
            page.goto(nodes[0].admin_url("/#cluster"))
            page.wait_for_function("() => document.querySelectorAll('#cluster-table tbody tr').length === 2",
                                   timeout=15000)
            table = page.locator("#cluster-table").text_content()
            self.assertIn("node-a", table)
            self.assertIn("node-b", table)
            revision = json.loads(nodes[0].admin_get("/cluster")[1])["nodes"][0]["revision"]
            self.assertIn(str(revision), page.locator("#cluster-table tbody tr").first.text_content())
            page.screenshot(path=os.path.join(SHOTS, "dashboard-cluster.png"))
            # The listener waiting for its certificate is marked, and says why.
            self.open(page, nodes[0], "routes")
            waiting_row = page.locator(f'#listeners-table tr[data-listener="{waiting}"]')
            self.assertIn("no certificate to serve yet", waiting_row.text_content())
            self.assertIn("warn", waiting_row.get_attribute("class"))
            plain_row = page.locator(f'#listeners-table tr[data-listener="127.0.0.1:{nodes[0].port}"]')
            self.assertEqual(plain_row.locator("td").nth(2).text_content(), "-")
            self.assertNotIn("warn", plain_row.get_attribute("class") or "")
            self.assertEqual(self.page_errors, [])
        finally:
            for node in nodes:
                node.stop()
            etcd.terminate()
            etcd.wait(10)
            shutil.rmtree(etcd_dir, ignore_errors=True)

    def test_a_kubernetes_node_shows_its_watches_failing_while_the_api_server_is_away(self):
        # A kubeconfig naming an API server that is not there (a port
        # nothing listens on): the node starts, answers 503 while it waits,
        # and the Cluster page lists each watch as retrying, with why.
        away = f"https://127.0.0.1:{free_port()}"
        kube_dir = tempfile.mkdtemp(prefix="wasmgate-dashboard-kube-")
        kubeconfig = os.path.join(kube_dir, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\n"
                    f"clusters:\n- name: away\n  cluster: {{server: \"{away}\", insecure-skip-tls-verify: true}}\n"
                    "users:\n- name: u\n  user: {token: t}\n"
                    "contexts:\n- name: c\n  context: {cluster: away, user: u}\ncurrent-context: c\n")
        gw = Gateway(f'config: {{kubernetes: {{kubeconfig: "{kubeconfig}"}}}}\n')
        try:
            self.assertEqual(gw.get("/")[0], 503)
            page = self.new_page()
            page.goto(gw.admin_url("/#cluster"))
            page.wait_for_function(
                "() => [...document.querySelectorAll('#watches-table tbody tr')]"
                ".some((tr) => tr.textContent.includes('HTTPRoute') && tr.textContent.includes('retrying'))",
                timeout=20000)
            self.assertTrue(page.locator("#cluster-table").is_hidden())
            note = page.locator("#cluster-note").text_content()
            self.assertIn("follows the Kubernetes API server", note)
            self.assertRegex(note, r"\d+ of \d+ watches are not watching")
            route_row = page.locator("#watches-table tbody tr", has_text="HTTPRoute").first
            self.assertIn("warn", route_row.get_attribute("class"))
            self.assertIn("connection refused", route_row.text_content().lower())
            page.screenshot(path=os.path.join(SHOTS, "dashboard-kubernetes-watches.png"))
            self.assertEqual(self.page_errors, [])
        finally:
            gw.stop()
            shutil.rmtree(kube_dir, ignore_errors=True)

    def test_a_component_compiling_in_the_background_is_shown_as_such(self):
        # The Python component with a custom section appended: the same
        # program, other bytes, so no compile cache has it and it compiles
        # from nothing (seconds), in the background.
        work = tempfile.mkdtemp(prefix="wasmgate-dashboard-compile-")
        with open(os.path.join(WASM, "component_python.wasm"), "rb") as f:
            component = f.read()
        payload = b"\x0fwasmgate-dashbd" + os.urandom(8)
        fresh = os.path.join(work, "fresh_python.wasm")
        with open(fresh, "wb") as f:
            f.write(component + b"\x00" + bytes([len(payload)]) + payload)
        gw = Gateway(f"""
limits: {{component_compile_wait_ms: 100}}
plugins:
  - {{name: py, wasm: "{fresh}"}}
routes:
  - {{name: app, component: {{plugin: py}}}}
""")
        try:
            page = self.new_page()
            self.open(page, gw, "plugins")
            row = page.locator('#plugins-table tr[data-plugin="py"]')
            row.wait_for(timeout=10000)
            self.assertIn("compiling", row.text_content())
            self.assertIn("warn", row.get_attribute("class"))
            page.screenshot(path=os.path.join(SHOTS, "dashboard-compiling.png"))
            self.assertEqual(gw.get("/")[0], 503)
            self.assertEqual(self.page_errors, [])
        finally:
            gw.stop()
            shutil.rmtree(work, ignore_errors=True)

    def test_recent_requests_come_from_the_access_log_and_filter(self):
        gw = Gateway(f"""
upstreams:
  - {{name: backend, nodes: [{{address: "127.0.0.1:{self.upstream.server_port}"}}]}}
plugins:
  - {{name: tag, wasm: "{WASM}/add_header.wasm"}}
routes:
  - {{name: api, path: {{prefix: /api}}, plugins: [{{plugin: tag, conf: dashboard}}], upstream: backend}}
  - {{name: down, path: {{prefix: /down}}, respond: {{status: 503, body: later}}}}
  - {{name: xss, path: {{prefix: "{XSS_PREFIX}"}}, respond: {{status: 200, body: x}}}}
""")
        try:
            for _ in range(3):
                self.assertEqual(gw.get("/api/a")[0], 200)
                self.assertEqual(gw.get("/down")[0], 503)
            gw.get(urllib.parse.quote(XSS_PREFIX))  # no route matches the encoded path: 404
            page = self.new_page()
            self.open(page, gw, "requests")
            page.wait_for_function("() => document.querySelectorAll('#requests-table tbody tr').length >= 7",
                                   timeout=10000)
            rows = page.locator("#requests-table tbody tr")
            # Newest first: the request for markup, its path shown as text.
            self.assertIn("script", rows.nth(0).locator("td").nth(2).text_content())
            self.assertEqual(self.dialogs, [])
            api = rows.nth(2).locator("td")
            self.assertEqual(api.nth(1).text_content(), "GET")
            self.assertEqual(api.nth(3).text_content(), "200")
            self.assertIn("tag", api.nth(7).text_content())
            self.assertTrue(api.nth(6).text_content().startswith("127.0.0.1:"))
            # Filtered by status class, then by route.
            page.select_option("#requests-status", "5xx")
            page.wait_for_function("() => [...document.querySelectorAll('#requests-table tbody tr')]"
                                   ".every(r => r.children[3].textContent === '503')"
                                   " && document.querySelectorAll('#requests-table tbody tr').length === 3",
                                   timeout=10000)
            page.select_option("#requests-status", "")
            page.select_option("#requests-route", "api")
            page.wait_for_function("() => [...document.querySelectorAll('#requests-table tbody tr')]"
                                   ".every(r => r.children[5].textContent === 'api')"
                                   " && document.querySelectorAll('#requests-table tbody tr').length === 3",
                                   timeout=10000)
            self.assertEqual(self.page_errors, [])
            page.screenshot(path=os.path.join(SHOTS, "dashboard-requests.png"), full_page=True)
        finally:
            gw.stop()

    def test_a_plugin_from_a_registry_shows_its_pinned_image(self):
        work = tempfile.mkdtemp(prefix="wasmgate-dashboard-oci-")
        port = free_port()
        with open(os.path.join(work, "config.yml"), "w") as f:
            f.write(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {work}/data\n"
                    f"http:\n  addr: 127.0.0.1:{port}\n")
        registry = subprocess.Popen([os.path.join(ROOT, "target/test-bin/registry"), "serve", "config.yml"], cwd=work,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env={**os.environ, "OTEL_TRACES_EXPORTER": "none"})
        gw = None
        try:
            deadline = time.time() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    self.assertLess(time.time(), deadline, "the registry did not start")
                    time.sleep(0.05)
            shutil.copy(os.path.join(WASM, "add_header.wasm"), os.path.join(work, "plugin.wasm"))
            pushed = subprocess.run([os.path.join(ROOT, "target/test-bin/oras"), "push", "--plain-http", "--format",
                                     "go-template={{.digest}}", f"127.0.0.1:{port}/filters/tag:1",
                                     "plugin.wasm:application/vnd.wasm.content.layer.v1+wasm"],
                                    cwd=work, capture_output=True, text=True, env={**os.environ, "HOME": work})
            self.assertEqual(pushed.returncode, 0, pushed.stderr)
            image = f"oci://127.0.0.1:{port}/filters/tag:1@{pushed.stdout.strip()}"
            gw = Gateway(f"""
plugins:
  - {{name: pulled, wasm: "oci://127.0.0.1:{port}/filters/tag:1", pull: always, registry: {{plain_http: true}}}}
routes:
  - {{name: api, path: {{prefix: /api}}, plugins: [{{plugin: pulled}}], respond: {{status: 200, body: ok}}}}
""")
            self.assertEqual(gw.get("/api"), (200, "ok"))
            page = self.new_page()
            self.open(page, gw, "plugins")
            cells = page.locator('#plugins-table tr[data-plugin="pulled"] td')
            self.assertEqual(cells.nth(cells.count() - 2).text_content(), image)
            _, status = gw.admin_get("/status")
            self.assertEqual(json.loads(status)["plugins"][0]["image"], image)
            self.assertEqual(self.page_errors, [])
        finally:
            if gw:
                gw.stop()
            registry.terminate()
            registry.wait(10)
            shutil.rmtree(work, ignore_errors=True)

    def test_assets_carry_a_strict_policy(self):
        gw = Gateway("routes: []\n")
        try:
            with urllib.request.urlopen(gw.admin_url("/"), timeout=5) as r:
                policy = r.headers["content-security-policy"]
                self.assertIn("script-src 'self'", policy)
                self.assertIn("frame-ancestors 'none'", policy)
                self.assertEqual(r.headers["x-content-type-options"], "nosniff")
            # A foreign Host (DNS rebinding) gets no page either.
            status, _ = gw.admin_get("/", headers={"Host": "evil.example"})
            self.assertEqual(status, 403)
        finally:
            gw.stop()


if __name__ == "__main__":
    print(f"screenshots: {SHOTS}", file=sys.stderr)
    unittest.main(verbosity=2)
