//! The metrics Proxy-Wasm plugins defined themselves, under names made
//! safe for Prometheus and kept apart from ours and from each other's.

use std::fmt::Write;

use wasmgate_proxy_wasm::shared::{shared, Metric, MetricKind};

use super::text::{escape, family};

/// Metrics Proxy-Wasm plugins defined. A plugin chooses its metrics' names,
/// so none may become one of ours, clash with another's, or break the
/// scrape: each family is `wasmcustom_<name made Prometheus-safe>` (Envoy's
/// prefix for them; counters end in `_total`), each series carries the
/// plugin that defined it and its name as given (`{plugin="auth",
/// name="a.b"}`), so names that collapse into one family stay apart, and a
/// family whose samples would clash with another's (of another type, say)
/// gets its type appended to its name (`_gauge`, `_summary`, ...).
pub(super) fn guest_defined_metrics(out: &mut String) {
    // Families by (name made safe, type), in a fixed order, so the renaming
    // of a clash does not depend on which plugin defined its metric first.
    let mut groups: std::collections::BTreeMap<(String, &str), Vec<Metric>> = Default::default();
    for metric in shared().metrics() {
        let base = format!("wasmcustom_{}", prometheus_name(&metric.name));
        let base = match metric.kind {
            MetricKind::Counter if !base.ends_with("_total") => format!("{base}_total"),
            _ => base,
        };
        groups
            .entry((base, kind_name(metric.kind)))
            .or_default()
            .push(metric);
    }
    let mut taken = std::collections::HashSet::new();
    for ((base, kind), mut members) in groups {
        let mut name = base.clone();
        let mut n = 1;
        while sample_names(&name, kind).iter().any(|s| taken.contains(s)) {
            n += 1;
            name = match n {
                2 => format!("{base}_{kind}"),
                _ => format!("{base}_{kind}_{n}"),
            };
        }
        taken.extend(sample_names(&name, kind));
        family(
            out,
            &name,
            kind,
            "Defined by a Proxy-Wasm plugin (labels: the plugin, and the name it gave).",
        );
        members.sort_by(|a, b| (&a.plugin, &a.name).cmp(&(&b.plugin, &b.name)));
        for m in members {
            let labels = format!(
                "plugin=\"{}\",name=\"{}\"",
                escape(&m.plugin),
                escape(&m.name)
            );
            match m.kind {
                MetricKind::Counter | MetricKind::Gauge => {
                    let _ = writeln!(out, "{name}{{{labels}}} {}", m.value);
                }
                MetricKind::Histogram => {
                    let _ = writeln!(out, "{name}_count{{{labels}}} {}", m.count);
                    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", m.sum);
                }
            }
        }
    }
}

/// The Prometheus type a plugin's metric is exposed as.
fn kind_name(kind: MetricKind) -> &'static str {
    match kind {
        MetricKind::Counter => "counter",
        MetricKind::Gauge => "gauge",
        MetricKind::Histogram => "summary",
    }
}

/// The sample names a family of type `kind` called `name` writes.
fn sample_names(name: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" | "gauge" => vec![name.to_string()],
        _ => vec![
            name.to_string(),
            format!("{name}_count"),
            format!("{name}_sum"),
        ],
    }
}

fn prometheus_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}
