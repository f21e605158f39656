#!/usr/bin/env python3
"""Scan wasmgate's TLS listeners with testssl.sh (Debian's `testssl.sh`
package) and check what issue 30 promises: no protocol below TLS 1.2, no weak
cipher, no known vulnerability reported. The result is recorded in
docs/tls.md ("What a scanner sees").

Two listeners are scanned, one with an ECDSA P-256 certificate and one with
RSA 2048, because TLS 1.2 offers different cipher suites for each. The
certificates come from a CA made here and handed to testssl with --add-ca, so
the report is about the listener, not about a self-signed certificate.

Writes bench/results/tls_scan.json (every finding testssl made) and prints a
summary; exits non-zero when a protocol, cipher or vulnerability finding is
rated LOW or worse. Takes one to two minutes.
Usage: bench/tls_scan.py   (needs target/release/wasmgate: make build)
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WASMGATE = os.path.join(ROOT, "target/release/wasmgate")
ECDSA_PORT, RSA_PORT, ADMIN_PORT = 18481, 18482, 18483
NAME = "scan.example"

# testssl's finding ids that tell whether a protocol, a class of ciphers or a
# known attack is open. Everything else (certificate details, HTTP headers,
# the server's banner) is recorded but not judged here.
PROTOCOLS = ["SSLv2", "SSLv3", "TLS1", "TLS1_1", "TLS1_2", "TLS1_3"]
WEAK_CIPHERS = ["cipherlist_NULL", "cipherlist_aNULL", "cipherlist_EXPORT", "cipherlist_LOW",
                "cipherlist_3DES_IDEA", "cipherlist_AVERAGE"]
VULNERABILITIES = ["heartbleed", "CCS", "ticketbleed", "ROBOT", "secure_renego",
                   "secure_client_renego", "CRIME_TLS", "POODLE_SSL", "fallback_SCSV", "SWEET32",
                   "FREAK", "DROWN", "LOGJAM", "BEAST", "LUCKY13", "RC4", "winshock"]
BAD = {"LOW", "MEDIUM", "HIGH", "CRITICAL"}


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(tmp):
    openssl("req", "-x509", "-nodes", "-days", "2", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:P-256", "-subj", "/CN=scan CA", "-keyout", f"{tmp}/ca.key",
            "-out", f"{tmp}/ca.pem")
    for kind, key in [("ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
                      ("rsa", ["-newkey", "rsa:2048"])]:
        openssl("req", "-new", "-nodes", *key, "-subj", f"/CN={NAME}",
                "-keyout", f"{tmp}/{kind}.key", "-out", f"{tmp}/{kind}.csr")
        with open(f"{tmp}/{kind}.ext", "w") as f:
            f.write(f"subjectAltName=DNS:{NAME}\nextendedKeyUsage=serverAuth\n")
        openssl("x509", "-req", "-in", f"{tmp}/{kind}.csr", "-CA", f"{tmp}/ca.pem",
                "-CAkey", f"{tmp}/ca.key", "-CAcreateserial", "-days", "2",
                "-extfile", f"{tmp}/{kind}.ext", "-out", f"{tmp}/{kind}.pem")


def start_gateway(tmp):
    config = f"{tmp}/wasmgate.yaml"
    with open(config, "w") as f:
        f.write(f"""admin: 127.0.0.1:{ADMIN_PORT}
listeners:
  - {{address: 127.0.0.1:{ECDSA_PORT}, tls: {{certificates: [ecdsa]}}}}
  - {{address: 127.0.0.1:{RSA_PORT}, tls: {{certificates: [rsa]}}}}
certificates:
  - {{name: ecdsa, cert: {tmp}/ecdsa.pem, key: {tmp}/ecdsa.key}}
  - {{name: rsa, cert: {tmp}/rsa.pem, key: {tmp}/rsa.key}}
routes:
  - {{name: hello, path: {{prefix: /}}, respond: {{status: 200, body: "hello\\n"}}}}
""")
    gateway = subprocess.Popen([WASMGATE, "run", "-c", config], stdout=subprocess.DEVNULL,
                               stderr=open(f"{tmp}/wasmgate.log", "w"))
    for port in (ECDSA_PORT, RSA_PORT):
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if gateway.poll() is not None:
                    sys.exit(f"wasmgate exited; see {tmp}/wasmgate.log")
                time.sleep(0.1)
    return gateway


def scan(tmp, kind, port):
    report = f"{tmp}/{kind}.json"
    subprocess.run(["testssl", "--quiet", "--color", "0", "--warnings", "off", "--nodns", "none",
                    "--ip", "127.0.0.1", "--add-ca", f"{tmp}/ca.pem", "--protocols",
                    "--standard", "--server-defaults", "--vulnerable", "--jsonfile", report,
                    f"https://{NAME}:{port}/"], stdout=subprocess.DEVNULL, check=False)
    with open(report) as f:
        return json.load(f)


def judge(findings):
    by_id = {f["id"]: f for f in findings}
    problems, rows = [], []
    for group, ids in [("protocol", PROTOCOLS), ("ciphers", WEAK_CIPHERS),
                       ("vulnerability", VULNERABILITIES)]:
        for finding_id in ids:
            finding = by_id.get(finding_id)
            if finding is None:
                if group != "vulnerability" or finding_id in ("heartbleed", "ROBOT", "CCS"):
                    problems.append(f"{finding_id}: testssl reported nothing")
                continue
            rows.append((group, finding_id, finding["severity"], finding["finding"]))
            if finding["severity"] in BAD:
                problems.append(f"{finding_id}: {finding['severity']}: {finding['finding']}")
    for finding_id in ("TLS1_2", "TLS1_3"):
        if "offered" not in by_id.get(finding_id, {}).get("finding", "") or \
                "not offered" in by_id[finding_id]["finding"]:
            problems.append(f"{finding_id} is not offered")
    return rows, problems


def main():
    if not shutil.which("testssl"):
        sys.exit("testssl is missing: scripts/install-deps.sh --bench installs it (Debian's testssl.sh)")
    tmp = tempfile.mkdtemp(prefix="wasmgate-tls-scan-")
    make_certificates(tmp)
    gateway = start_gateway(tmp)
    results, failed = {}, False
    try:
        for kind, port in [("ecdsa", ECDSA_PORT), ("rsa", RSA_PORT)]:
            findings = scan(tmp, kind, port)
            rows, problems = judge(findings)
            results[kind] = {"findings": findings, "problems": problems}
            print(f"\n## {kind} listener (127.0.0.1:{port})\n")
            print("| check | id | severity | finding |\n|---|---|---|---|")
            for row in rows:
                print("| " + " | ".join(row) + " |")
            for problem in problems:
                print(f"PROBLEM {problem}")
            failed |= bool(problems)
    finally:
        gateway.terminate()
        gateway.wait()
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results/tls_scan.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\nFAILED: see the problems above" if failed else "\nno protocol below TLS 1.2, "
          "no weak cipher, no vulnerability reported")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
