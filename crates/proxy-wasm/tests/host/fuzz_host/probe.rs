//! The probe: a well-formed request whose every effect is checked, run
//! through a plugin between batches of hostile streams.

use std::sync::Arc;
use std::time::Duration;

use wasmgate_proxy_wasm::shared::shared;
use wasmgate_proxy_wasm::{FilterPlugin, Flow, Headers, HttpExchange};
use wasmgate_testkit::fuzz::Rng;

use super::blob::{encode_map, Blob};
use super::drive::{drive, pairs, request_info, End};
use super::guest::{
    CALL_RESPONSE, DELETE, DONE, LOG, REQUEST_BODY, REQUEST_HEADERS, RESPONSE_BODY,
    RESPONSE_HEADERS,
};
use super::host_fns::HOST_FUNCTIONS;
use super::reports::script_path;
use super::script::{OpBuilder, Script};

pub(super) struct Probe {
    pub(super) blob: Blob,
    metric: String,
    /// Scripts per phase, with and without an http call.
    with_call: Vec<(u8, Vec<u8>)>,
    without_call: Vec<(u8, Vec<u8>)>,
    /// Host calls each makes.
    calls_with: usize,
    calls_without: usize,
}

impl Probe {
    pub(super) fn new(rng: &mut Rng) -> Probe {
        let mut b = Blob::default();
        let metric = format!("probe_counter_{:x}", rng.next_u64());
        let e = |b: &mut Blob, bytes: &[u8]| b.add("probe", bytes);
        let x_probe = e(&mut b, b"x-probe");
        let x_echo = e(&mut b, b"x-echo");
        let x_path = e(&mut b, b"x-path");
        let x_prop = e(&mut b, b"x-prop");
        let x_resp = e(&mut b, b"x-resp");
        let x_call = e(&mut b, b"x-call-status");
        let x_call_body = e(&mut b, b"x-call-body");
        let server = e(&mut b, b"server");
        let status = e(&mut b, b":status");
        let request_path = e(&mut b, b"request\0path");
        let prop_key = e(&mut b, b"probe\0key");
        let value = e(&mut b, b"probe-value");
        let new_body = e(&mut b, b"probe-body-replaced");
        let prefix = e(&mut b, b"prefix-");
        let upstream = e(&mut b, b"fuzz-upstream");
        let call_map = e(
            &mut b,
            &encode_map(&[
                (b":method", b"POST"),
                (b":path", b"/probe-call"),
                (b":authority", b"fuzz-upstream"),
            ]),
        );
        let empty_map = e(&mut b, &encode_map(&[]));
        let shared_key = e(&mut b, b"probe-shared");
        let metric_name = e(&mut b, metric.as_bytes());
        let blob = b.finish();

        let o = OpBuilder::new;
        let get_value = |map: u32, key, slot: u32| {
            o("proxy_get_header_map_value")
                .arg(map)
                .buf(key)
                .out(slot)
                .out(slot + 1)
                .build()
        };
        let add_from = |key, slot: u32| {
            o("proxy_add_header_map_value")
                .arg(0)
                .buf(key)
                .ind(slot, 0)
                .ind(slot + 1, 0)
                .build()
        };
        let mut request_headers = vec![
            get_value(0, x_probe, 0),
            add_from(x_echo, 0),
            o("proxy_get_property")
                .buf(request_path)
                .out(2)
                .out(3)
                .build(),
            add_from(x_path, 2),
            o("proxy_set_property").buf(prop_key).buf(value).build(),
            o("proxy_get_property").buf(prop_key).out(4).out(5).build(),
            add_from(x_prop, 4),
        ];
        let request_body = vec![
            o("proxy_get_buffer_bytes")
                .arg(0)
                .arg(0)
                .arg(1000)
                .out(0)
                .out(1)
                .build(),
            o("proxy_set_buffer_bytes")
                .arg(0)
                .arg(0)
                .arg(u32::MAX)
                .buf(new_body)
                .build(),
        ];
        let response_headers = vec![
            o("proxy_replace_header_map_value")
                .arg(2)
                .buf(x_resp)
                .buf(value)
                .build(),
            o("proxy_remove_header_map_value")
                .arg(2)
                .buf(server)
                .build(),
        ];
        let response_body = vec![o("proxy_set_buffer_bytes")
            .arg(1)
            .arg(0)
            .arg(0)
            .buf(prefix)
            .build()];
        let log = vec![
            get_value(0, x_probe, 0),
            o("proxy_set_shared_data")
                .buf(shared_key)
                .ind(0, 0)
                .ind(1, 0)
                .arg(0)
                .build(),
            o("proxy_define_metric")
                .arg(0)
                .buf(metric_name)
                .out(2)
                .build(),
            o("proxy_increment_metric").ind(2, 0).arg(1).arg(0).build(),
            o("proxy_get_metric").ind(2, 0).out(3).build(),
        ];
        let size = vec![o("proxy_get_header_map_size").arg(0).out(0).build()];
        let call_response = vec![
            get_value(6, status, 10),
            add_from(x_call, 10),
            o("proxy_get_buffer_bytes")
                .arg(4)
                .arg(0)
                .arg(1000)
                .out(12)
                .out(13)
                .build(),
            add_from(x_call_body, 12),
            o("proxy_continue_stream").arg(0).build(),
        ];
        let mut without = vec![
            (REQUEST_BODY, Script::new(request_body)),
            (RESPONSE_HEADERS, Script::new(response_headers)),
            (RESPONSE_BODY, Script::new(response_body)),
            (LOG, Script::new(log)),
            (DONE, Script::new(size.clone())),
            (DELETE, Script::new(size)),
        ];
        let calls = |scripts: &[(u8, Script)]| scripts.iter().map(|(_, s)| s.ops.len()).sum();
        let mut with = Vec::new();
        std::mem::swap(&mut with, &mut without);
        without = with
            .iter()
            .map(|(p, s)| (*p, Script::new(s.ops.clone())))
            .collect();
        without.push((REQUEST_HEADERS, Script::new(request_headers.clone())));
        request_headers.push(
            o("proxy_http_call")
                .buf(upstream)
                .buf(call_map)
                .buf(value)
                .buf(empty_map)
                .arg(5000)
                .out(6)
                .build(),
        );
        let mut paused = Script::new(request_headers);
        paused.action = 1;
        with.push((REQUEST_HEADERS, paused));
        with.push((CALL_RESPONSE, Script::new(call_response)));
        let (calls_with, calls_without) = (calls(&with), calls(&without));
        let encode = |scripts: Vec<(u8, Script)>| {
            scripts
                .into_iter()
                .map(|(phase, s)| (phase, s.encode(&blob)))
                .collect()
        };
        Probe {
            with_call: encode(with),
            without_call: encode(without),
            calls_with,
            calls_without,
            metric,
            blob,
        }
    }

    /// The probe's counter, as `plugin` defined it (metrics are per plugin).
    fn metric_value(&self, plugin: &str) -> i64 {
        shared()
            .metrics()
            .iter()
            .find(|m| m.plugin == plugin && m.name == self.metric)
            .map_or(0, |m| m.value)
    }

    /// Runs a well-formed request through `plugin` and checks all it did.
    pub(super) async fn run(
        &self,
        plugin: &Arc<FilterPlugin>,
        vm_id: &str,
        with_call: bool,
        rng: &mut Rng,
    ) {
        let token = format!("token-{:016x}", rng.next_u64());
        let mut exchange = Box::new(HttpExchange {
            request_headers: pairs(&[
                (b":method", b"POST"),
                (b":path", b"/probe?x=1"),
                (b":authority", b"probe.local"),
                (b"x-probe", token.as_bytes()),
            ]),
            request_body: b"probe-request-body".to_vec(),
            response_headers: pairs(&[(b":status", b"200"), (b"server", b"upstream")]),
            response_body: b"probe-response".to_vec(),
            info: request_info(),
            ..HttpExchange::default()
        });
        let scripts = if with_call {
            &self.with_call
        } else {
            &self.without_call
        };
        for (phase, script) in scripts {
            exchange
                .properties
                .insert(script_path(*phase), script.clone());
        }
        let metric_before = self.metric_value(plugin.name());
        let mut reports = Vec::new();
        let (end, flows) = tokio::time::timeout(
            Duration::from_secs(30),
            drive(plugin, &mut exchange, &mut reports, false),
        )
        .await
        .expect("the probe hung");
        match end {
            End::Finished => {}
            End::Crashed(callback, message, _) => {
                panic!("the probe failed in {callback}: {message}")
            }
            End::Stalled => panic!("the probe stalled"),
            End::PausedTooLong => panic!("the probe paused too long"),
            End::Deadline => panic!("the probe ran past a callback deadline"),
        }
        assert!(flows.iter().all(|f| *f == Flow::Continue), "{flows:?}");
        let expected = if with_call {
            self.calls_with
        } else {
            self.calls_without
        };
        assert_eq!(reports.len(), expected, "probe calls: {reports:?}");
        for r in &reports {
            assert_eq!(
                r.status, 0,
                "probe call {} returned {}",
                HOST_FUNCTIONS[r.f as usize].name, r.status
            );
        }
        let header = |map: &Headers, name: &str| map.get(name.as_bytes()).map(<[u8]>::to_vec);
        let request = &exchange.request_headers;
        assert_eq!(header(request, "x-echo"), Some(token.clone().into_bytes()));
        assert_eq!(header(request, "x-path"), Some(b"/probe?x=1".to_vec()));
        assert_eq!(header(request, "x-prop"), Some(b"probe-value".to_vec()));
        if with_call {
            assert_eq!(header(request, "x-call-status"), Some(b"200".to_vec()));
            assert_eq!(
                header(request, "x-call-body"),
                Some(b"probe-value".to_vec())
            );
        }
        assert_eq!(exchange.request_body, b"probe-body-replaced");
        let response = &exchange.response_headers;
        assert_eq!(header(response, "x-resp"), Some(b"probe-value".to_vec()));
        assert_eq!(header(response, "server"), None);
        assert_eq!(exchange.response_body, b"prefix-probe-response");
        assert_eq!(
            shared().get(vm_id, b"probe-shared").map(|(v, _)| v),
            Some(token.into_bytes())
        );
        // Hostile scripts of this plugin may have set this counter anywhere
        // (an id is easy to guess), even to i64::MAX; the host's increment
        // wraps, so must this.
        assert_eq!(
            self.metric_value(plugin.name()),
            metric_before.wrapping_add(1)
        );
    }
}
