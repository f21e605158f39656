#!/usr/bin/env bash
# Database benchmark (issue 14, seed 004): an endpoint that runs one query on
# an empty PostgreSQL table, side by side in one run:
#   plugin-pool   (a) `wasmgate serve orders.wasm list_orders`, the host pool (16)
#   plugin-nopool (b) the same with `--service-pool-size 0`: a connection per request
#   native        (c) a native Rust handler on the same listener and pool
#                     (crates/gateway/examples/native_orders.rs)
#   go-pgx        (d) Go Fiber + pgx v5's pool (16) (reference/go-pgx)
# each on loopback and with the database behind an emulated round trip
# (Toxiproxy: +RTT_MS, split over both directions). PostgreSQL requires TLS
# (self-signed certificate) and SCRAM-SHA-256, as a managed database does.
# Then a Redis-backed rate limit (Higress's wasm-go filter, higress_rate_limit)
# on a `respond` route, next to the same route without it, with Redis on
# loopback and behind the same emulated round trip.
#
# The server under test and the databases share CPU 0 (the node and what it
# talks to; wasmgate and Go with one worker thread); wrk and Toxiproxy (the
# "network") run on CPU 1. Variants alternate within each round.
#
# Usage: [ROUNDS=3] [SECONDS=5] [RTT_MS=5] bench/db.sh   (then bench/db_report.py)
# Output: bench/results/db.json
set -euo pipefail
# SECONDS is bash's own clock: read the value this script was started with.
dur="$(tr '\0' '\n' </proc/$$/environ | sed -n 's/^SECONDS=//p')"
dur="${dur:-5}"
rounds="${ROUNDS:-3}"
rtt="${RTT_MS:-5}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

PG=18501 PG_FAR=18502 REDIS=18503 REDIS_FAR=18504 TOXI_API=18505 SRV=18510 GW=18511
TOXIPROXY_VERSION=v2.12.0
bin="$root/target/bench-bin" # Toxiproxy, built here (target/ is not tracked)
toxiproxy="$bin/toxiproxy-server"

# --- What the run needs ------------------------------------------------------
command -v wrk >/dev/null || { apt-get install -y wrk || { apt-get update && apt-get install -y wrk; }; }
for tool in redis-server psql openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: scripts/install-deps.sh" >&2; exit 1; }
done
pgbin="$(dirname "$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -1)")"
[ -x "$pgbin/postgres" ] || { echo "PostgreSQL is missing: scripts/install-deps.sh" >&2; exit 1; }
if [ ! -x "$toxiproxy" ]; then
  mkdir -p "$bin"
  GOBIN="$bin" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
  mv "$bin/server" "$toxiproxy"
fi
[ -x target/release/wasmgate ] || cargo build --release
[ -x target/release/examples/native_orders ] || cargo build --release --example native_orders -p wasmgate-gateway
[ -x target/reference/gopgx ] || reference/go-pgx/build.sh
for p in orders higress_rate_limit; do
  [ -f "target/wasm/$p.wasm" ] || { plugins/build.sh; break; }
done

tmp="$(mktemp -d /tmp/wasmgate-db.XXXXXX)"
chmod 755 "$tmp"
pids=()
pg_pid=
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # SIGINT: PostgreSQL's fast shutdown.
  [ -n "$pg_pid" ] && { kill -INT "$pg_pid" 2>/dev/null || true; wait "$pg_pid" 2>/dev/null || true; }
  rm -rf "$tmp"
}
trap cleanup EXIT

wait_port() { # port, pid
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "process $2 for port $1 exited" >&2; return 1; }
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# --- PostgreSQL: TLS required, SCRAM-SHA-256 ---------------------------------
# PostgreSQL refuses to run as root: as root, the cluster belongs to the
# `postgres` user (Debian's package creates it) and runs as that user, as
# crates/testkit does; psql and openssl run as the caller.
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  as_pg=(setpriv --reuid=postgres --regid=postgres --clear-groups --)
fi
pgdir="$tmp/pg"
mkdir -p "$pgdir"
[ ${#as_pg[@]} -eq 0 ] || chown postgres: "$pgdir"
(cd "$pgdir" && "${as_pg[@]}" env HOME="$pgdir" "$pgbin/initdb" -D "$pgdir/data" -U postgres --auth=trust \
  --locale=C --encoding=UTF8 --no-sync >"$tmp/initdb.log" 2>&1) || { cat "$tmp/initdb.log" >&2; exit 1; }
# A self-signed certificate naming 127.0.0.1 (subjectAltName: rustls ignores
# the CN) that is not a CA (rustls refuses a CA certificate as a server's own).
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" \
  -addext "keyUsage=critical,digitalSignature,keyEncipherment" -addext "extendedKeyUsage=serverAuth" \
  -keyout "$pgdir/data/server.key" -out "$pgdir/data/server.crt" 2>/dev/null
chmod 600 "$pgdir/data/server.key"
ca="$tmp/ca.pem"
cp "$pgdir/data/server.crt" "$ca"
cat >>"$pgdir/data/postgresql.conf" <<EOF
# bench/db.sh
listen_addresses = '127.0.0.1'
port = $PG
unix_socket_directories = '$pgdir'
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
password_encryption = 'scram-sha-256'
max_connections = 200
log_connections = on
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
# TCP only with TLS and a SCRAM password; the superuser through the socket.
cat >"$pgdir/data/pg_hba.conf" <<EOF
local   all all              trust
hostssl all all 127.0.0.1/32 scram-sha-256
EOF
[ ${#as_pg[@]} -eq 0 ] || chown -R postgres: "$pgdir"
pglog="$tmp/postgres.log"
taskset -c 0 "${as_pg[@]}" "$pgbin/postgres" -D "$pgdir/data" </dev/null >"$pglog" 2>&1 &
pg_pid=$!
for _ in $(seq 300); do
  "$pgbin/pg_isready" -q -h "$pgdir" -p $PG && break
  kill -0 $pg_pid 2>/dev/null || { cat "$pglog" >&2; exit 1; }
  sleep 0.1
done
password="$(openssl rand -hex 12)"
su_psql() { psql -X -q -v ON_ERROR_STOP=1 -h "$pgdir" -p $PG -U postgres "$@"; }
su_psql -d postgres -c "create role app login password '$password'" -c "create database app owner app"
psql -X -q -v ON_ERROR_STOP=1 -h "$pgdir" -p $PG -U app -d app -f plugins/rust/orders/schema.sql
backends() { su_psql -d app -At -c "select count(*) from pg_stat_activity where usename = 'app'"; }
connections_so_far() { grep -c 'connection authorized' "$pglog" || true; }

# Check the setup: no TLS is refused, TLS + SCRAM is what a client gets.
if PGPASSWORD="$password" psql -X -At "host=127.0.0.1 port=$PG user=app dbname=app sslmode=disable" \
  -c 'select 1' >/dev/null 2>&1; then
  echo "PostgreSQL accepted a connection without TLS" >&2
  exit 1
fi
tls_check="$(PGPASSWORD="$password" psql -X -At \
  "host=127.0.0.1 port=$PG user=app dbname=app sslmode=verify-full sslrootcert=$ca" \
  -c 'select version from pg_stat_ssl where pid = pg_backend_pid()')"
grep -q 'method=scram-sha-256' "$pglog" || { echo "no SCRAM authentication in the log" >&2; exit 1; }
echo "PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}'): TLS ($tls_check) and SCRAM-SHA-256 required" >&2

# --- Redis ---------------------------------------------------------------------
taskset -c 0 redis-server --bind 127.0.0.1 --port $REDIS --save '' --appendonly no \
  --logfile "$tmp/redis.log" --dir "$tmp" &
pids+=($!)
wait_port $REDIS "${pids[-1]}"

# --- The emulated network: Toxiproxy ------------------------------------------
# A TCP proxy in front of each database, with a latency toxic on each
# direction: requests (upstream) wait `up` ms, answers (downstream) `down` ms,
# so every request/answer exchange takes RTT_MS more. Toxiproxy's latency is
# whole milliseconds, hence the split (2 + 3 for 5).
up=$((rtt / 2)) down=$((rtt - rtt / 2))
LOG_LEVEL=warn taskset -c 1 "$toxiproxy" -host 127.0.0.1 -port $TOXI_API >"$tmp/toxiproxy.log" 2>&1 &
pids+=($!)
wait_port $TOXI_API "${pids[-1]}"
toxi() { curl -sf -X POST "http://127.0.0.1:$TOXI_API$1" -d "$2" >/dev/null; }
for proxy in "pg $PG_FAR $PG" "redis $REDIS_FAR $REDIS"; do
  read -r name listen upstream <<<"$proxy"
  toxi /proxies "{\"name\":\"$name\",\"listen\":\"127.0.0.1:$listen\",\"upstream\":\"127.0.0.1:$upstream\",\"enabled\":true}"
  toxi "/proxies/$name/toxics" "{\"name\":\"up\",\"type\":\"latency\",\"stream\":\"upstream\",\"toxicity\":1,\"attributes\":{\"latency\":$up,\"jitter\":0}}"
  toxi "/proxies/$name/toxics" "{\"name\":\"down\",\"type\":\"latency\",\"stream\":\"downstream\",\"toxicity\":1,\"attributes\":{\"latency\":$down,\"jitter\":0}}"
done
# The round trip as measured: Redis PINGs on one connection, direct and
# through the proxy (median of 50, in ms). Both proxies have the same toxics.
measured_rtt="$(python3 - "$REDIS" "$REDIS_FAR" <<'EOF'
import json, socket, statistics, sys, time
def rtt(port):
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    took = []
    for _ in range(50):
        t = time.perf_counter(); c.sendall(b"PING\r\n"); assert c.recv(64) == b"+PONG\r\n"
        took.append(time.perf_counter() - t)
    return round(statistics.median(took) * 1000, 3)
print(json.dumps({"loopback": rtt(int(sys.argv[1])), "proxied": rtt(int(sys.argv[2]))}))
EOF
)"
echo "round trips (ms): $measured_rtt" >&2

# --- The contenders --------------------------------------------------------------
url_of() { echo "postgres://app:$password@127.0.0.1:$1/app?sslmode=require"; }
server_cmd() { # variant, database port -> cmd=(...)
  local url; url="$(url_of "$2")"
  local serve=(target/release/wasmgate serve target/wasm/orders.wasm list_orders --port $SRV --threads 1
    --log-level warn --service "orders=$url" --service-ca-file "$ca")
  case "$1" in
    plugin-pool) cmd=("${serve[@]}") ;;
    plugin-nopool) cmd=("${serve[@]}" --service-pool-size 0) ;;
    native) cmd=(target/release/examples/native_orders $SRV "$url" "$ca") ;;
    go-pgx) cmd=(target/reference/gopgx -addr 127.0.0.1:$SRV
      -url "postgres://app:$password@127.0.0.1:$2/app?sslmode=verify-full&sslrootcert=$ca&pool_max_conns=16") ;;
  esac
}
variants=(plugin-pool plugin-nopool native go-pgx)
declare -A db_port=([loopback]=$PG [rtt]=$PG_FAR)
nets=(loopback rtt)

# Prints one JSON object: req/s, p50/p99 in µs, errors (non-2xx + socket
# errors), requests completed, PostgreSQL connections opened during the run.
measure() { # bench, net, variant, url, conns, seconds, round [, lua script]
  local before after
  before="$(connections_so_far)"
  taskset -c 1 wrk -t1 -c"$5" -d"$6s" --timeout 10s --latency ${8:+-s "$8"} "$4" >"$tmp/wrk.out"
  after="$(connections_so_far)"
  awk -v b="$1" -v n="$2" -v v="$3" -v c="$5" -v r="$7" -v pgc="$((after - before))" '
    function us(x) { return x ~ /us$/ ? x + 0 : x ~ /ms$/ ? x * 1000 : x * 1e6 }
    $1 == "50%" { p50 = us($2) }
    $1 == "99%" { p99 = us($2) }
    / requests in / { req = $1 }
    /^Requests\/sec:/ { rps = $2 }
    /^  Non-2xx/ { err += $NF }
    /^  Socket errors:/ { err += $4 + $6 + $8 + $10 }
    END { printf "{\"bench\":\"%s\",\"net\":\"%s\",\"variant\":\"%s\",\"conns\":%d,\"round\":%d,\"rps\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"errors\":%d,\"requests\":%d,\"pg_connections\":%d}\n",
                 b, n, v, c, r, rps, p50, p99, err, req, pgc }' "$tmp/wrk.out"
}

lua="$root/bench/post-customer.lua"
runs=()
start_server() { # variant, net -> $server_pid
  server_cmd "$1" "${db_port[$2]}"
  GOMAXPROCS=1 taskset -c 0 "${cmd[@]}" >"$tmp/server.log" 2>&1 &
  server_pid=$!
  wait_port $SRV $server_pid
  # The answer for a customer without orders, before anything is timed.
  local body
  body="$(curl -sf -X POST --data-binary c-42 "http://127.0.0.1:$SRV/")" ||
    { echo "$1 ($2): request failed" >&2; cat "$tmp/server.log" >&2; exit 1; }
  [ "$body" = "[]" ] || { echo "$1 ($2): unexpected answer '$body'" >&2; exit 1; }
}
stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  sleep 0.5 # PostgreSQL's backends of the closed connections exit
}

# --- The rate limit: one gateway, three routes -------------------------------------
w="$root/target/wasm"
cat >"$tmp/gateway.yaml" <<EOF
listen: 127.0.0.1:$GW
limits: {threads: 1}
services:
  - {name: redis, redis: "redis://127.0.0.1:$REDIS"}
  - {name: redisfar, redis: "redis://127.0.0.1:$REDIS_FAR"}
plugins:
  - {name: limit, wasm: $w/higress_rate_limit.wasm, services: [redis]}
  - {name: limit_far, wasm: $w/higress_rate_limit.wasm, services: [redisfar]}
routes:
  - {name: plain, path: {prefix: /plain}, respond: {status: 200, body: ok}}
  - name: limited
    path: {prefix: /limited}
    plugins: [{plugin: limit, conf: {redis: {service_name: redis}, limit: 1000000000, window_seconds: 60}}]
    respond: {status: 200, body: ok}
  - name: limited_far
    path: {prefix: /far}
    plugins: [{plugin: limit_far, conf: {redis: {service_name: redisfar}, limit: 1000000000, window_seconds: 60}}]
    respond: {status: 200, body: ok}
EOF
target/release/wasmgate check -c "$tmp/gateway.yaml" >/dev/null
taskset -c 0 target/release/wasmgate run -c "$tmp/gateway.yaml" --log-level warn >"$tmp/gateway.log" 2>&1 &
pids+=($!)
wait_port $GW "${pids[-1]}"
declare -A rl_url=([plain]="http://127.0.0.1:$GW/plain" [limited]="http://127.0.0.1:$GW/limited"
  [limited-rtt]="http://127.0.0.1:$GW/far")
rl_scenarios=(plain limited limited-rtt)
for s in "${rl_scenarios[@]}"; do
  curl -sf -D "$tmp/headers" -o /dev/null "${rl_url[$s]}" || { echo "$s: ${rl_url[$s]} failed" >&2; exit 1; }
  case "$s" in
    plain) ;;
    *) grep -qi '^x-ratelimit-remaining' "$tmp/headers" && ! grep -qi '^x-ratelimit-error' "$tmp/headers" ||
         { echo "$s: the rate limit did not count in Redis:" >&2; cat "$tmp/headers" >&2; exit 1; } ;;
  esac
done

# --- The run ------------------------------------------------------------------------
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for net in "${nets[@]}"; do
    for v in "${variants[@]}"; do
      start_server "$v" "$net"
      # Warm-up: pools filled (16), caches, the plugin's instances. wrk ends
      # it with 32 requests in flight, which the server then abandons; the
      # pause keeps their aftermath out of the c=1 latencies (for serve it
      # is ~0.1 s: docs/benchmarks.md).
      measure db "$net" "$v" "http://127.0.0.1:$SRV/" 32 1 "$r" "$lua" >/dev/null
      sleep 1
      runs+=("$(measure db "$net" "$v" "http://127.0.0.1:$SRV/" 1 "$dur" "$r" "$lua")")
      echo "${runs[-1]}"
      runs+=("$(measure db "$net" "$v" "http://127.0.0.1:$SRV/" 32 "$dur" "$r" "$lua")")
      # Connections open to PostgreSQL right after the c=32 run.
      runs[-1]="${runs[-1]%\}},\"pg_backends\":$(backends)}"
      echo "${runs[-1]}"
      stop_server
    done
  done
  for s in "${rl_scenarios[@]}"; do
    measure ratelimit "$([ "$s" = limited-rtt ] && echo rtt || echo loopback)" "$s" "${rl_url[$s]}" 32 1 "$r" >/dev/null
    sleep 1
    for c in 1 32; do
      runs+=("$(measure ratelimit "$([ "$s" = limited-rtt ] && echo rtt || echo loopback)" "$s" "${rl_url[$s]}" $c "$dur" "$r")")
      echo "${runs[-1]}"
    done
  done
done

mkdir -p bench/results
{
  printf '{"rounds":%d,"seconds":%d,"rtt_ms":%d,"toxics_ms":{"upstream":%d,"downstream":%d},"measured_rtt_ms":%s,\n' \
    "$rounds" "$dur" "$rtt" "$up" "$down" "$measured_rtt"
  printf ' "postgres":"%s","tls":"%s","toxiproxy":"%s","loadavg_before":"%s","loadavg_after":"%s",\n "runs":[\n  ' \
    "$("$pgbin/postgres" --version | awk '{print $3}')" "$tls_check" "$TOXIPROXY_VERSION" "$load_before" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
  printf '%s\n' "${runs[@]}" | sed '$!s/$/,/; 2,$s/^/  /'
  echo ' ]}'
} >bench/results/db.json
echo "wrote bench/results/db.json; tables and plot: bench/db_report.py" >&2
