# wasmgate: the two commands that matter are `make demo` and `make test`.
CARGO ?= cargo
WASMGATE := target/release/wasmgate
PORT ?= 8080
ADMIN_PORT ?= 9901
UPSTREAM_PORT ?= 9000

PREFIX ?= /usr/local

.PHONY: demo demo-gateway demo-deps demo-plugins install test deps plugins build reference reference-bench lint guest unit e2e bench reliability clean

## Serve the bundled hello plugin on :$(PORT). Needs only Rust (rustup):
## demo-deps adds the wasm targets and what building the binary needs.
demo: demo-deps demo-plugins build
	@echo
	@echo "$(WASMGATE) is serving target/wasm/hello.wasm (function hello) on 127.0.0.1:$(PORT)."
	@echo "From a second terminal, try:"
	@echo "  curl -X POST 127.0.0.1:$(PORT) -d 'John Doe'"
	@echo "Ctrl-C stops it. For the gateway: make demo-gateway"
	@echo
	$(WASMGATE) serve target/wasm/hello.wasm hello --port $(PORT)

## The example gateway (examples/gateway/) in front of a small echoing upstream
## on :$(UPSTREAM_PORT), listening on :$(PORT), admin on :$(ADMIN_PORT). Needs Go for its Go filter.
demo-gateway: demo-deps demo-plugins build
	PORT=$(PORT) ADMIN_PORT=$(ADMIN_PORT) UPSTREAM_PORT=$(UPSTREAM_PORT) examples/gateway/demo.sh

## What the demos need, and only that (make test's deps install the rest).
demo-deps:
	scripts/install-deps.sh --demo

demo-plugins:
	plugins/build.sh --demo

## Copy the binary to $(PREFIX)/bin (default /usr/local; PREFIX=~/.local for your own).
install: build
	install -D -m 755 $(WASMGATE) $(DESTDIR)$(PREFIX)/bin/wasmgate
	@echo "installed $(DESTDIR)$(PREFIX)/bin/wasmgate"

## Everything CI checks: lint, unit and end-to-end tests, differential tests,
## the dashboard in a real browser.
test: deps plugins build reference lint guest
	$(CARGO) test --release --workspace
	python3 tests/browser/dashboard_test.py

## The guest libraries' own tests (guest/rust, guest/go), natively.
guest:
	cd guest/rust && $(CARGO) test --quiet
	cd guest/go && go test ./...

deps:
	scripts/install-deps.sh

plugins:
	plugins/build.sh

build:
	$(CARGO) build --release

## The official extism crate (=1.30.0): its behaviour for the differential
## tests (the `differential` profile, quick to build), its speed for benchmarks.
reference:
	cd reference/extism-ref && $(CARGO) build --profile differential

reference-bench:
	cd reference/extism-ref && $(CARGO) build --release

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

bench: deps plugins build reference reference-bench
	scripts/install-deps.sh --bench
	bench/run.sh

## The reliability suite of issue 4 (R1-R7); figures in docs/reliability.md.
reliability: deps plugins build
	reliability/run.sh

clean:
	$(CARGO) clean
	rm -rf plugins/target reference/extism-ref/target guest/rust/target
