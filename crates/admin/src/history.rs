//! A short history of every route's traffic for the dashboard's live charts
//! (`GET /stats/history`): once a second, the requests, server errors and
//! latency each route served since the second before, for the last ten
//! minutes. Kept by the node itself, so a page opened now shows the minutes
//! before it; costs one pass over the routes' counters per second.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use wasmgate_runtime::stats::LATENCY_BUCKETS;

use wasmgate_gateway::LiveGateway;

/// How often a sample is taken, and how many are kept (ten minutes).
const INTERVAL: Duration = Duration::from_secs(1);
const KEPT: usize = 600;

#[derive(Default)]
pub struct History {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    samples: VecDeque<Sample>,
    /// Each route's counters at the last sample (to take differences).
    last: HashMap<String, Counters>,
}

struct Sample {
    at_ms: u64,
    routes: Vec<(String, Point)>,
}

/// One route over one interval.
struct Point {
    requests: u64,
    server_errors: u64,
    /// Upper bounds of the latency buckets holding the median and the 99th
    /// percentile, in milliseconds (`None` without requests).
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

#[derive(Clone)]
struct Counters {
    requests: u64,
    server_errors: u64,
    buckets: Vec<u64>,
}

impl History {
    /// Samples `live` every second, for as long as the process runs.
    pub fn start(live: Arc<LiveGateway>) -> Arc<History> {
        let history = Arc::new(History::default());
        let sampler = history.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                ticks.tick().await;
                sampler.sample(&live);
            }
        });
        history
    }

    fn sample(&self, live: &LiveGateway) {
        let gateway = live.current();
        let mut inner = self.inner.lock().expect("history lock");
        let mut routes = Vec::new();
        let mut now = HashMap::new();
        for route in gateway.route_stats() {
            let counters = Counters {
                requests: route.responses.iter().sum(),
                server_errors: route.responses[4],
                buckets: route.latency.snapshot().buckets,
            };
            // A reload builds new routes with new counters: a count below
            // the last one started again from zero.
            let before = inner
                .last
                .get(route.name)
                .filter(|b| b.requests <= counters.requests)
                .cloned();
            routes.push((route.name.to_string(), point(before.as_ref(), &counters)));
            now.insert(route.name.to_string(), counters);
        }
        inner.last = now;
        if inner.samples.len() == KEPT {
            inner.samples.pop_front();
        }
        inner.samples.push_back(Sample {
            at_ms: wasmgate_base::unix_ms(),
            routes,
        });
    }

    /// The samples, oldest first, as `GET /stats/history` answers them.
    pub fn to_json(&self) -> Value {
        let inner = self.inner.lock().expect("history lock");
        let samples: Vec<Value> = inner
            .samples
            .iter()
            .map(|s| {
                let routes: serde_json::Map<String, Value> = s
                    .routes
                    .iter()
                    .map(|(name, p)| {
                        let point = json!({
                            "requests": p.requests,
                            "server_errors": p.server_errors,
                            "p50_ms": p.p50_ms,
                            "p99_ms": p.p99_ms,
                        });
                        (name.clone(), point)
                    })
                    .collect();
                json!({"at_ms": s.at_ms, "routes": routes})
            })
            .collect();
        json!({"interval_ms": INTERVAL.as_millis() as u64, "samples": samples})
    }
}

fn point(before: Option<&Counters>, now: &Counters) -> Point {
    let (requests, server_errors, buckets) = match before {
        Some(b) => (
            now.requests - b.requests,
            now.server_errors.saturating_sub(b.server_errors),
            now.buckets
                .iter()
                .zip(&b.buckets)
                .map(|(n, b)| n.saturating_sub(*b))
                .collect(),
        ),
        None => (now.requests, now.server_errors, now.buckets.clone()),
    };
    Point {
        requests,
        server_errors,
        p50_ms: quantile(&buckets, 0.50),
        p99_ms: quantile(&buckets, 0.99),
    }
}

/// The upper bound (ms) of the bucket holding quantile `q`; past the last
/// bound, the last bound itself.
fn quantile(buckets: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            let bound = LATENCY_BUCKETS.get(i).or(LATENCY_BUCKETS.last()).copied()?;
            return Some(bound * 1000.0);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_name_the_bucket_that_holds_them() {
        let mut buckets = vec![0; LATENCY_BUCKETS.len() + 1];
        buckets[3] = 98; // <= 0.1 ms
        buckets[7] = 2; // <= 5 ms
        assert_eq!(quantile(&buckets, 0.5), Some(0.1));
        assert_eq!(quantile(&buckets, 0.99), Some(5.0));
        assert_eq!(quantile(&[0; 13], 0.5), None);
    }

    #[test]
    fn a_reset_counter_counts_from_zero() {
        let before = Counters {
            requests: 10,
            server_errors: 1,
            buckets: vec![10],
        };
        let now = Counters {
            requests: 14,
            server_errors: 1,
            buckets: vec![14],
        };
        let p = point(Some(&before), &now);
        assert_eq!((p.requests, p.server_errors), (4, 0));
    }
}
