// The wasmgate dashboard: plain JavaScript over the admin API (docs/admin.md).
// Every value from the gateway is inserted as text (textContent, never
// innerHTML), so a route named <script> shows as those characters. The admin
// token, when the listener needs one, is kept in sessionStorage and sent in the
// Authorization header; writes also carry X-Wasmgate-Admin, the header the
// listener asks of writes made without a token (docs/admin.md, "intent").
"use strict";

const TOKEN_KEY = "wasmgate-admin-token";
const POLL_MS = 2000;
const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
let timer = null;

// --- the admin API ---------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(describe(body) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// The message of an admin API error body, with the reasons a rejected change
// gives (the same lines `wasmgate check` prints).
function describe(body) {
  if (!body || typeof body !== "object") return String(body || "");
  const parts = [];
  if (body.error) parts.push(typeof body.error === "string" ? body.error : JSON.stringify(body.error));
  if (Array.isArray(body.reasons)) parts.push(...body.reasons);
  return parts.join("\n");
}

async function api(path, options = {}) {
  const headers = Object.assign({ "X-Wasmgate-Admin": "1" }, options.headers || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  const response = await fetch(path, Object.assign({}, options, { headers, cache: "no-store" }));
  if (response.status === 401) {
    showLogin(token ? "The token was refused." : "");
    throw new ApiError(401, { error: "the admin token is needed" });
  }
  const type = response.headers.get("content-type") || "";
  let body;
  if (type.startsWith("application/json")) body = await response.json();
  else if (type.startsWith("image/svg")) body = await response.blob();
  else body = await response.text();
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// A JSON object's own value under `key` (route names like `constructor`
// must not find what every object inherits).
function own(object, key) {
  return object && Object.hasOwn(object, key) ? object[key] : undefined;
}

// Prometheus text into [{name, labels, value}].
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)$/);
    if (!m) continue;
    const labels = Object.create(null);
    const re = /(\w+)="((?:[^"\\]|\\.)*)"/g;
    let l;
    while ((l = re.exec(m[3] || "")) !== null) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

// --- small DOM helpers -----------------------------------------------------

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c);
    else td.textContent = c === undefined || c === null ? "" : String(c);
    tr.appendChild(td);
  }
  return tr;
}

function fill(tableId, rows) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows);
}

function fmt(n, digits = 1) {
  if (n === null || n === undefined || Number.isNaN(n)) return "-";
  return Number(n).toFixed(digits);
}

function showError(message) {
  $("error").textContent = message || "";
}

// --- pages -----------------------------------------------------------------

const pages = {
  async overview() {
    const [status, history, metrics] = await Promise.all([
      api("/status"), api("/stats/history"), api("/metrics").then(parseMetrics),
    ]);
    renderFacts(status);
    const samples = history.samples || [];
    const routes = new Set();
    for (const s of samples) for (const r of Object.keys(s.routes)) routes.add(r);
    const names = [...routes].sort();
    const seconds = (history.interval_ms || 1000) / 1000;
    const series = (pick) => names.map((n) => samples.map((s) => (own(s.routes, n) ? pick(own(s.routes, n)) : null)));
    chart("chart-rps", samples, series((p) => p.requests / seconds));
    chart("chart-errors", samples, series((p) => p.server_errors / seconds));
    chart("chart-p50", samples, series((p) => p.p50_ms));
    chart("chart-p99", samples, series((p) => p.p99_ms));
    $("legend").replaceChildren(...names.map((n, i) => {
      const item = el("span", n, "legend-item");
      item.style.borderColor = COLOURS[i % COLOURS.length];
      return item;
    }));
    // Totals since the route was built, from /metrics; recent rates and
    // latency from the last 10 samples.
    const totals = new Map();
    for (const m of metrics) {
      if (m.name !== "wasmgate_route_requests_total") continue;
      if (!totals.has(m.labels.route)) totals.set(m.labels.route, new Map([["all", 0]]));
      const t = totals.get(m.labels.route);
      t.set("all", t.get("all") + m.value);
      t.set(m.labels.class, m.value);
    }
    const recent = samples.slice(-10);
    const rows = [...totals.keys()].sort().map((name) => {
      const points = recent.map((s) => own(s.routes, name)).filter(Boolean);
      const requests = points.reduce((a, p) => a + p.requests, 0);
      const worst = (k) => points.reduce((a, p) => (p[k] === null ? a : Math.max(a, p[k])), -1);
      const t = totals.get(name);
      const tr = row([name, t.get("all"), t.get("2xx") || 0, t.get("4xx") || 0, t.get("5xx") || 0,
        fmt(points.length ? requests / (points.length * seconds) : 0),
        worst("p50_ms") < 0 ? "-" : "≤ " + worst("p50_ms") + " ms",
        worst("p99_ms") < 0 ? "-" : "≤ " + worst("p99_ms") + " ms"]);
      tr.dataset.route = name;
      return tr;
    });
    fill("route-totals", rows);
  },

  async routes() {
    const [config, metrics, status] = await Promise.all([api("/config"), api("/metrics").then(parseMetrics), api("/status")]);
    // Upgraded connections (WebSocket tunnels) per route, open and since start.
    const tunnels = new Map();
    for (const m of metrics) {
      const which = { wasmgate_tunnels_open: "open", wasmgate_tunnels_total: "total" }[m.name];
      if (!which || !m.labels.route) continue;
      if (!tunnels.has(m.labels.route)) tunnels.set(m.labels.route, { open: 0, total: 0 });
      tunnels.get(m.labels.route)[which] = m.value;
    }
    fill("routes-table", (config.routes || []).map((r) => {
      const t = tunnels.get(r.name);
      const tr = row([r.name, describeMatch(r), describeFilters(r, config), describeEndpoint(r),
        t ? `${t.open} open / ${t.total}` : "-"]);
      tr.dataset.route = r.name;
      return tr;
    }));
    const node = new Map();
    for (const m of metrics) {
      if (!m.name.startsWith("wasmgate_upstream_node_") || !m.labels.upstream) continue;
      const key = m.labels.upstream + " " + m.labels.node;
      if (!node.has(key)) node.set(key, Object.create(null));
      node.get(key)[m.name.replace("wasmgate_upstream_node_", "")] = m.value;
    }
    const rows = [];
    for (const u of config.upstreams || []) {
      for (const n of u.nodes || []) {
        const address = typeof n === "string" ? n : n.address;
        const weight = typeof n === "string" ? 1 : (n.weight ?? 1);
        const m = node.get(u.name + " " + address) || Object.create(null);
        rows.push(row([u.name, address, u.protocol || "http1", weight,
          m.healthy === undefined ? "-" : (m.healthy ? "yes" : "no"),
          m.connections ?? "-", m.requests_total ?? "-", m.retries_total ?? "-"]));
      }
    }
    fill("upstreams-table", rows);
    fill("listeners-table", (status.listeners || []).map((l) => {
      // A cluster node's TLS listener may name certificates not written yet.
      const tr = row([l.address, l.tls ? "HTTPS (HTTP/1.1, HTTP/2)" : "HTTP (HTTP/1.1, h2c)", l.problem || "-"]);
      tr.dataset.listener = l.address;
      if (l.problem) tr.classList.add("warn");
      return tr;
    }));
    fill("certificates-table", (status.certificates || []).map((c) => {
      const days = Math.floor((c.not_after * 1000 - Date.now()) / 86400000);
      const tr = row([c.name, c.names.join(", "), c.subject, new Date(c.not_after * 1000).toISOString().slice(0, 10),
        days < 0 ? "expired" : String(days)]);
      tr.dataset.certificate = c.name;
      if (days < 14) tr.classList.add("warn");
      return tr;
    }));
  },

  async plugins() {
    const status = await api("/status");
    // One plugin whose status cannot be read shows as such; the others still show.
    // A component still compiling has no instances yet: it says so instead.
    const settled = await Promise.allSettled((status.plugins || []).map((p) => p.state === "compiling"
      ? Promise.resolve(null) : api(`/plugins/${encodeURIComponent(p.name)}/status`)));
    fill("plugins-table", settled.map((result, i) => {
      if (result.status === "fulfilled" && result.value === null) {
        const p = status.plugins[i];
        const seconds = Math.round((Date.now() - p.compiling_since_ms) / 1000);
        const tr = row([p.name, p.kind, `compiling (${seconds} s so far): its routes answer 503 until it is done`]);
        tr.dataset.plugin = p.name;
        tr.classList.add("warn");
        return tr;
      }
      if (result.status === "rejected") {
        const tr = row([status.plugins[i].name, status.plugins[i].kind, "status unavailable: " + result.reason.message]);
        tr.dataset.plugin = status.plugins[i].name;
        return tr;
      }
      const d = result.value;
      const sum = (f) => d.instance_sets.reduce((a, s) => a + f(s), 0);
      const button = el("button", "details");
      button.addEventListener("click", () => showPlugin(d));
      const tr = row([d.name, d.kind,
        `${sum((s) => s.pool.idle + s.pool.in_use)} / ${sum((s) => s.pool.idle)}`,
        sum((s) => s.stats.calls.count),
        sum((s) => s.stats.host_errors + s.stats.out_of_memory),
        sum((s) => s.stats.traps), sum((s) => s.stats.timeouts),
        fmt(sum((s) => s.stats.cpu_seconds), 3),
        (sum((s) => s.stats.memory_bytes) / 1048576).toFixed(1) + " MiB",
        d.image || `sha256:${(d.sha256 || "").slice(0, 12)}`, button]);
      tr.dataset.plugin = d.name;
      // A filter left starting in the background on some routes.
      const starting = status.plugins[i].starting_routes || [];
      if (starting.length) {
        const routes = starting.map((s) => `${s.route} (${Math.round((Date.now() - s.since_ms) / 1000)} s, `
          + (s.previous_serves ? "its version before serves" : "answers 503") + ")").join(", ");
        tr.title = `still starting on ${routes}`;
        tr.cells[1].textContent += ` · starting on ${routes}`;
        tr.classList.add("warn");
      }
      return tr;
    }));
  },

  async requests() {
    const route = $("requests-route").value;
    const status = $("requests-status").value;
    const query = new URLSearchParams({ limit: "100" });
    if (route) query.set("route", route);
    if (status) query.set("status", status);
    const [data, routes] = await Promise.all([api("/requests?" + query), api("/routes")]);
    // The route filter offers the routes there are now (and keeps a choice
    // whose route went away, so the list does not jump).
    const names = routes.map((r) => r.name);
    if (route && !names.includes(route)) names.push(route);
    const options = [el("option", "all")];
    options[0].value = "";
    for (const name of names) {
      const option = el("option", name);
      option.value = name;
      options.push(option);
    }
    $("requests-route").replaceChildren(...options);
    $("requests-route").value = route;
    $("requests-note").textContent = data.access_log ? ""
      : "This node keeps no access log (access_log.enabled is false), so no requests are kept.";
    fill("requests-table", data.requests.map((r) => {
      const filters = (r.filters || []).map((f) => `${f.name} ${fmt(f.ms, 2)}`).join(", ");
      const by = r.local_response ? "filter " + r.local_response : (r.error ? "gateway: " + r.error : "");
      const tr = row([r.time.slice(11, 23), r.method, r.host + r.path, r.status, fmt(r.duration_ms, 2),
        r.route || "-", r.upstream || "-", filters || "-", by, r.request_id, r.trace_id || "-"]);
      tr.dataset.requestId = r.request_id;
      if (r.status >= 500) tr.classList.add("warn");
      return tr;
    }));
  },

  async edit() {},

  async cluster() {
    try {
      const view = await api("/cluster");
      const kubernetes = view.source === "kubernetes";
      $("cluster-table").hidden = kubernetes;
      $("watches-table").hidden = !kubernetes;
      if (kubernetes) {
        // A Kubernetes node: its watches of the API server, and how each is doing.
        const watches = Object.entries(view.watches || {});
        $("cluster-note").textContent = `This node follows the Kubernetes API server as ${view.controller_name}; `
          + (view.unhealthy_watches ? `${view.unhealthy_watches} of ${watches.length} watches are not watching.` : `all ${watches.length} watches are watching.`);
        fill("watches-table", watches.map(([name, w]) => {
          const tr = row([name, w.state, new Date(w.since_ms).toLocaleString(), w.errors, w.relists, w.last_error || ""]);
          if (w.state !== "watching") tr.classList.add("warn");
          return tr;
        }));
        return;
      }
      $("cluster-note").textContent = `This node: ${view.this_node}; etcd revision ${view.etcd_revision}.`;
      fill("cluster-table", (view.nodes || []).map((n) => row([n.node, n.listen, n.admin, n.version,
        n.revision, n.healthy ? "yes" : "no", n.behind ? "yes" : "no", n.last_error || ""])));
    } catch (e) {
      if (e.status !== 404) throw e;
      $("cluster-note").textContent = describe(e.body);
      fill("cluster-table", []);
    }
  },
};

function renderFacts(status) {
  const reload = status.reload || {};
  const uptime = status.started_at_ms ? Math.round((Date.now() - status.started_at_ms) / 1000) : null;
  const facts = [
    ["version", status.version],
    ["uptime", uptime === null ? "-" : `${Math.floor(uptime / 3600)}h ${Math.floor(uptime / 60) % 60}m ${uptime % 60}s`],
    ["config", status.config && status.config.file ? status.config.file : "etcd, revision " + ((status.config || {}).revision ?? "-")],
    ["generation", reload.generation],
    ["last reload", reload.loaded_at_ms ? new Date(reload.loaded_at_ms).toLocaleString() : "-"],
    ["last reload result", reload.last_error
      ? `rejected${reload.last_error_at_ms ? " at " + new Date(reload.last_error_at_ms).toLocaleString() : ""}: ${reload.last_error}`
      : "applied" + (reload.failed_reloads ? ` (${reload.failed_reloads} rejected earlier)` : "")],
    ["filters", reload.filters === undefined ? "-" : `${reload.filters} (${reload.filters_kept} kept from the configuration before, ${reload.filters - reload.filters_kept} started)`],
    ["last admin change", status.last_change ? `${status.last_change.action}: ${status.last_change.outcome}` : "-"],
  ];
  $("facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", k), el("dd", v ?? "-")]));
  $("node").textContent = `v${status.version}`;
}

function describeMatch(r) {
  const parts = [];
  const hosts = r.hosts || (r.host ? [r.host] : []);
  if (hosts.length) parts.push("host " + hosts.join(", "));
  const p = r.path || {};
  if (p.exact) parts.push("path = " + p.exact);
  if (p.prefix) parts.push("path " + p.prefix + "*");
  if (p.regex) parts.push("path ~ " + p.regex);
  if (r.methods && r.methods.length) parts.push(r.methods.join(","));
  const headers = Object.entries(r.headers || {}).map(([k, v]) => `${k}: ${v}`)
    .concat(Object.entries(r.header_regex || {}).map(([k, v]) => `${k} ~ ${v}`));
  if (headers.length) parts.push(headers.join(", "));
  const query = Object.entries(r.query || {}).map(([k, v]) => `${k}=${v}`)
    .concat(Object.entries(r.query_regex || {}).map(([k, v]) => `${k}~${v}`));
  if (query.length) parts.push("?" + query.join("&"));
  if (r.scheme) parts.push(r.scheme + " only");
  if (r.ports && r.ports.length) parts.push("port " + r.ports.join(","));
  if (r.cors) parts.push("CORS from " + (r.cors.allow_origins || []).join(", "));
  return parts.join("; ") || "everything";
}

function describeRewrite(w) {
  if (!w) return "";
  const parts = [];
  if (w.path) parts.push("path " + w.path);
  if (w.replace_prefix) parts.push(`${w.replace_prefix.from}* → ${w.replace_prefix.to}*`);
  if (w.host) parts.push("host " + w.host);
  return "; rewrite " + parts.join(", ");
}

function describeMirrors(mirrors) {
  return (mirrors || []).map((m) => `; mirror ${m.upstream} ${m.percent ?? 100}%`).join("");
}

function describeFilters(r, config) {
  const global = (config.global_plugins || []).map((f) => f.plugin);
  const own = (r.plugins || []).map((f) => f.plugin + (f.conf !== undefined && f.conf !== null ? " " + JSON.stringify(f.conf) : "") + (f.priority ? ` (priority ${f.priority})` : ""));
  return [...global.map((g) => g + " (global)"), ...own].join(" → ") || "-";
}

function describeEndpoint(r) {
  if (r.upstream) return "upstream " + r.upstream + describeRewrite(r.rewrite) + describeMirrors(r.mirror);
  if (r.respond) return `respond ${r.respond.status ?? 200}`;
  if (r.function) return `function ${r.function.plugin}`;
  if (r.component) return `component ${r.component.plugin}`;
  if (r.redirect) return `redirect ${r.redirect.status ?? 301}`;
  return "-";
}

function showPlugin(d) {
  $("plugin-detail").hidden = false;
  $("plugin-detail-title").textContent = d.name;
  const crashes = d.instance_sets.map((s) => s.last_crash).filter(Boolean).sort((a, b) => b.at_ms - a.at_ms);
  if (!crashes.length) {
    $("plugin-crash").textContent = "none";
  } else {
    const c = crashes[0];
    const frames = (c.report.frames || []).map((f) => `  at ${f.function}${f.file ? ` (${f.file}:${f.line ?? "?"})` : ""}`);
    // The request id is what a client's error answer names: it finds this report.
    const request = c.report.request_id != null ? ` (request ${c.report.request_id})` : "";
    $("plugin-crash").textContent = [`${new Date(c.at_ms).toLocaleString()}${request}: ${c.report.function} ${c.report.kind}: ${c.report.message}`, ...frames].join("\n");
  }
  $("profile-button").dataset.plugin = d.name;
}

async function takeProfile() {
  const plugin = $("profile-button").dataset.plugin;
  $("profile-status").textContent = "recording 3 s of live traffic…";
  $("flamegraph").hidden = true;
  try {
    const svg = await api(`/profile?seconds=3&plugin=${encodeURIComponent(plugin)}`, { method: "POST" });
    const image = $("flamegraph");
    if (image.src) URL.revokeObjectURL(image.src);
    image.src = URL.createObjectURL(svg instanceof Blob ? svg : new Blob([svg], { type: "image/svg+xml" }));
    image.hidden = false;
    $("profile-status").textContent = "done";
  } catch (e) {
    $("profile-status").textContent = e.message;
  }
}

// An SVG line chart of `series` (one array of numbers or nulls per route).
function chart(id, samples, series) {
  const svg = $(id);
  const ns = "http://www.w3.org/2000/svg";
  const [w, h, left, bottom] = [600, 200, 40, 20];
  const values = series.flat().filter((v) => v !== null);
  const max = Math.max(1e-9, ...values) * 1.1;
  const n = Math.max(2, samples.length);
  const x = (i) => left + (i / (n - 1)) * (w - left - 5);
  const y = (v) => h - bottom - (v / max) * (h - bottom - 5);
  const nodes = [];
  const axis = document.createElementNS(ns, "path");
  axis.setAttribute("d", `M${left},5 V${h - bottom} H${w - 5}`);
  axis.setAttribute("class", "axis");
  nodes.push(axis);
  for (const v of [max / 1.1, max / 2.2]) {
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", 2);
    label.setAttribute("y", y(v) + 4);
    label.textContent = fmt(v, v < 10 ? 2 : 0);
    nodes.push(label);
  }
  const span = samples.length > 1 ? Math.round((samples[samples.length - 1].at_ms - samples[0].at_ms) / 1000) : 0;
  const caption = document.createElementNS(ns, "text");
  caption.setAttribute("x", left);
  caption.setAttribute("y", h - 4);
  caption.textContent = `last ${span} s`;
  nodes.push(caption);
  series.forEach((points, k) => {
    let d = "";
    points.forEach((v, i) => {
      if (v === null) return;
      d += (d ? " L" : "M") + x(i).toFixed(1) + "," + y(v).toFixed(1);
    });
    if (!d) return;
    const line = document.createElementNS(ns, "path");
    line.setAttribute("d", d);
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", COLOURS[k % COLOURS.length]);
    line.setAttribute("stroke-width", "1.5");
    nodes.push(line);
  });
  svg.replaceChildren(...nodes);
}

// --- editing ---------------------------------------------------------------

function editPath() {
  const name = $("edit-name").value.trim();
  if (!name) throw new Error("a name is needed");
  return `/${$("edit-kind").value}/${encodeURIComponent(name)}`;
}

async function editAction(action) {
  $("edit-error").textContent = "";
  $("edit-result").textContent = "";
  try {
    const path = editPath();
    if (action === "load") {
      // Typing while the answer is on its way wins: a late answer does not
      // replace what the operator wrote meanwhile.
      const before = $("edit-body").value;
      const entry = await api(path);
      if ($("edit-body").value !== before) throw new Error("the editor changed while loading; it was left as it is");
      $("edit-body").value = JSON.stringify(entry, null, 2);
      return;
    }
    let result;
    if (action === "delete") {
      result = await api(path, { method: "DELETE" });
    } else {
      const text = $("edit-body").value;
      const json = text.trim().startsWith("{");
      result = await api(path, { method: "PUT", body: text, headers: { "Content-Type": json ? "application/json" : "application/yaml" } });
    }
    $("edit-result").textContent = `applied (generation ${result.generation ?? "-"}${result.revision ? ", etcd revision " + result.revision : ""})`;
  } catch (e) {
    $("edit-error").textContent = e.message;
  }
}

// --- navigation and the token ----------------------------------------------

function showLogin(message) {
  stop();
  for (const p of document.querySelectorAll(".page")) p.hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("token").focus();
}

function stop() {
  if (timer) clearTimeout(timer);
  timer = null;
}

async function show() {
  stop();
  const page = (location.hash || "#overview").slice(1);
  const render = pages[page] || pages.overview;
  $("login").hidden = true;
  for (const p of document.querySelectorAll(".page")) p.hidden = p.id !== "page-" + page;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === page);
  $("logout").hidden = !sessionStorage.getItem(TOKEN_KEY);
  const tick = async () => {
    try {
      await render();
      showError("");
      document.body.dataset.loaded = page;
    } catch (e) {
      if (e.status === 401) return;
      showError(e.message);
    }
    // The overview is live; the other pages refresh when opened (and the
    // plugin table every few seconds), so that an open page costs little.
    if (page === "overview" || page === "requests") timer = setTimeout(tick, POLL_MS);
    else if (page === "plugins") timer = setTimeout(tick, 3 * POLL_MS);
  };
  await tick();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token").value = "";
    show();
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("");
  });
  $("edit-form").addEventListener("submit", (event) => {
    event.preventDefault();
    editAction("apply");
  });
  $("edit-load").addEventListener("click", () => editAction("load"));
  $("edit-delete").addEventListener("click", () => editAction("delete"));
  $("profile-button").addEventListener("click", takeProfile);
  $("requests-route").addEventListener("change", show);
  $("requests-status").addEventListener("change", show);
  window.addEventListener("hashchange", show);
  show();
});
