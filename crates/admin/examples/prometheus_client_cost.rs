//! `/metrics` by hand or through the `prometheus-client` crate (issue 32,
//! item 4: replace the hand-written text, or say with a measurement why
//! not). The same route families (requests by status class, rejections,
//! the latency histogram) for `ROUTES` routes, both ways, side by side:
//!
//! - `scrape`: rendering the families, as each `/metrics` request does
//!   (ours: `wasmgate_admin::metrics::route_families` over the live
//!   counters; the crate's: `encoding::text::encode` over a `Registry`);
//! - `count`: what a request pays to be counted (ours: the route's own
//!   atomics; the crate's: a `Family` lookup by labels, and, as a careful
//!   user would, a handle looked up once per route and kept).
//!
//! Run: `cargo run --release -p wasmgate-admin --example prometheus_client_cost [-- --quick] [--write DIR]`;
//! JSON lines on stdout (docs/benchmarks.md, "/metrics: by hand or prometheus-client").

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bench_timing::{report, Protocol};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use wasmgate_base::histogram::{LatencyHistogram, LATENCY_BUCKETS};
use wasmgate_gateway::stats::RouteStats;

const ROUTES: usize = 200;
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteClass {
    route: String,
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

/// One route's counters as the gateway keeps them.
#[derive(Default)]
struct OurRoute {
    name: String,
    responses: [AtomicU64; 5],
    rejected: AtomicU64,
    latency: LatencyHistogram,
}

struct Theirs {
    registry: Registry,
    requests: Family<RouteClass, Counter>,
    latency: Family<RouteLabel, Histogram, fn() -> Histogram>,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS.iter().copied())
}

fn theirs() -> Theirs {
    let mut registry = Registry::default();
    let requests = Family::<RouteClass, Counter>::default();
    let rejected = Family::<RouteLabel, Counter>::default();
    let latency: Family<RouteLabel, Histogram, fn() -> Histogram> =
        Family::new_with_constructor(latency_histogram);
    registry.register(
        "wasmgate_route_requests",
        "Requests answered per route and status class.",
        requests.clone(),
    );
    registry.register(
        "wasmgate_route_rejected",
        "Requests refused by the route's max_concurrent_requests (503).",
        rejected.clone(),
    );
    registry.register(
        "wasmgate_route_response_seconds",
        "Time from a request's arrival to its response headers.",
        latency.clone(),
    );
    for r in 0..ROUTES {
        let route = format!("route-{r}");
        for class in CLASSES {
            requests
                .get_or_create(&RouteClass {
                    route: route.clone(),
                    class,
                })
                .inc_by(r as u64 + 1);
        }
        drop(rejected.get_or_create(&RouteLabel {
            route: route.clone(),
        }));
        let histogram = latency.get_or_create(&RouteLabel { route });
        for i in 0..20 {
            histogram.observe(0.0001 * f64::from(i));
        }
    }
    Theirs {
        registry,
        requests,
        latency,
    }
}

fn ours() -> Vec<OurRoute> {
    (0..ROUTES)
        .map(|r| {
            let route = OurRoute {
                name: format!("route-{r}"),
                ..OurRoute::default()
            };
            for n in &route.responses {
                n.fetch_add(r as u64 + 1, Ordering::Relaxed);
            }
            for i in 0..20 {
                route.latency.record(Duration::from_micros(100 * i));
            }
            route
        })
        .collect()
}

fn main() {
    let protocol = Protocol::from_args();
    let our_routes = ours();
    let their = theirs();

    let (iters, ns) = protocol.measure(|| {
        let stats: Vec<RouteStats> = our_routes
            .iter()
            .map(|r| RouteStats {
                name: &r.name,
                responses: std::array::from_fn(|i| r.responses[i].load(Ordering::Relaxed)),
                rejected: r.rejected.load(Ordering::Relaxed),
                latency: &r.latency,
                mirrors: Vec::new(),
            })
            .collect();
        let mut out = String::new();
        wasmgate_admin::metrics::route_families(&stats, &mut out);
        std::hint::black_box(out);
    });
    report("wasmgate", "scrape", ROUTES, iters, ns);
    let (iters, ns) = protocol.measure(|| {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &their.registry).expect("encodes");
        std::hint::black_box(out);
    });
    report("prometheus-client", "scrape", ROUTES, iters, ns);

    // Counting one request on route 7 (class 2xx) and its latency.
    let route = &our_routes[7];
    let (iters, ns) = protocol.measure(|| {
        route.responses[1].fetch_add(1, Ordering::Relaxed);
        route.latency.record(Duration::from_micros(250));
    });
    report("wasmgate", "count", 0, iters, ns);
    let name = "route-7".to_string();
    let (iters, ns) = protocol.measure(|| {
        their
            .requests
            .get_or_create(&RouteClass {
                route: name.clone(),
                class: "2xx",
            })
            .inc();
        their
            .latency
            .get_or_create(&RouteLabel {
                route: name.clone(),
            })
            .observe(0.00025);
    });
    report("prometheus-client", "count-by-labels", 0, iters, ns);
    let counter = their
        .requests
        .get_or_create(&RouteClass {
            route: name.clone(),
            class: "2xx",
        })
        .clone();
    let histogram = their
        .latency
        .get_or_create(&RouteLabel { route: name })
        .clone();
    let (iters, ns) = protocol.measure(|| {
        counter.inc();
        histogram.observe(0.00025);
    });
    report("prometheus-client", "count-by-handle", 0, iters, ns);

    // The two renderings' sizes, for the record (the crate writes
    // OpenMetrics: `# EOF`, `_total` only on samples, `# UNIT`).
    let mut ours_text = String::new();
    let stats: Vec<RouteStats> = our_routes
        .iter()
        .map(|r| RouteStats {
            name: &r.name,
            responses: std::array::from_fn(|i| r.responses[i].load(Ordering::Relaxed)),
            rejected: 0,
            latency: &r.latency,
            mirrors: Vec::new(),
        })
        .collect();
    wasmgate_admin::metrics::route_families(&stats, &mut ours_text);
    let mut theirs_text = String::new();
    prometheus_client::encoding::text::encode(&mut theirs_text, &their.registry).expect("encodes");
    // `--write DIR` keeps both renderings, for `promtool check metrics`.
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--write") {
        let dir = std::path::Path::new(&args[at + 1]);
        std::fs::write(dir.join("wasmgate.txt"), &ours_text).expect("writable");
        std::fs::write(dir.join("prometheus-client.txt"), &theirs_text).expect("writable");
    }
    eprintln!(
        "rendered: ours {} bytes, {} lines; prometheus-client {} bytes, {} lines",
        ours_text.len(),
        ours_text.lines().count(),
        theirs_text.len(),
        theirs_text.lines().count()
    );
}
