//! Higress's AI gateway and WAF, built unchanged from Higress's sources
//! (plugins/third_party/higress-plugins/) and configured as their READMEs
//! say, behind `wasmgate run`:
//!
//! - ai-proxy in front of an OpenAI-style model (the test upstream's
//!   `/v1/chat/completions`): chat completions whole and streamed, with its
//!   model mapping and its API token; Anthropic's Messages API converted to
//!   OpenAI's and back, whole and streamed. It pauses the request headers
//!   until it has the body (Envoy's StopIteration) and converts the answer in
//!   its response callbacks, which it runs only for an answer that came from
//!   the upstream (`response.code_details`).
//! - the WAF (Coraza) with rules of its own: SQL injection and XSS refused
//!   with 403 from the query and from the body, clean requests passed.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use crate::common::client;
use crate::common::gateway::{metric, send, until_metric, with_upstream};

const AI_PROXY: &str = r#"
listen: "{listen}"
plugins:
  - {name: ai-proxy, wasm: "{wasm:higress_plugin_ai-proxy}"}
upstreams:
  - {name: llm, nodes: [{address: "{backend}"}]}
routes:
  - name: ai
    plugins:
      - plugin: ai-proxy
        conf:
          provider:
            type: openai
            apiTokens: ["sk-wasmgate-test"]
            modelMapping: {"gpt-3.5-turbo": "gpt-4o-mini", "*": "gpt-4o"}
    upstream: llm
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higress_ai_proxy_maps_models_and_answers_chat_completions() {
    let (upstream, gw) = with_upstream("openai", AI_PROXY).await;
    let c = client();
    let chat = r#"{"model":"gpt-3.5-turbo","messages":[{"role":"user","content":"hello there"}]}"#;
    let reply = send(
        &c,
        "POST",
        &gw.url("/v1/chat/completions"),
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer client-key"),
        ],
        chat,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.json();
    assert_eq!(answer["model"], "gpt-4o-mini", "the model mapped: {answer}");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "echo: hello there"
    );

    // The upstream got the provider's token in place of the client's, for
    // the provider's host, and the mapped model in the body.
    let sent = upstream.received("/v1/chat/completions");
    let headers = sent.last().expect("the upstream was asked");
    assert_eq!(headers["authorization"], "Bearer sk-wasmgate-test");
    assert_eq!(headers["host"], "api.openai.com");
    let body = upstream.received_bodies("/v1/chat/completions");
    let body: serde_json::Value = serde_json::from_slice(body.last().unwrap()).unwrap();
    assert_eq!(body["model"], "gpt-4o-mini");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higress_ai_proxy_streams_chat_completions_as_they_come() {
    let (_upstream, gw) = with_upstream("openai", AI_PROXY).await;
    let chat =
        r#"{"model":"gpt-4","stream":true,"messages":[{"role":"user","content":"one two three"}]}"#;
    let (status, events) = stream_events(&gw.url("/v1/chat/completions"), chat).await;
    assert_eq!(status, 200);
    let data: Vec<&str> = events
        .iter()
        .flat_map(|(_, text)| text.lines())
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{events:?}");
    let content: String = data
        .iter()
        .filter(|d| **d != "[DONE]")
        .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap())
        .map(|event| {
            assert_eq!(event["model"], "gpt-4o", "the model mapped by `*`");
            event["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(content, "echo: one two three");
    assert_streamed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higress_ai_proxy_converts_claude_messages_to_openai_and_back() {
    let (upstream, gw) = with_upstream("openai", AI_PROXY).await;
    let c = client();
    let message = r#"{"model":"claude-sonnet-4","max_tokens":100,"messages":[{"role":"user","content":"hi claude"}]}"#;
    let reply = send(
        &c,
        "POST",
        &gw.url("/v1/messages"),
        &[
            ("content-type", "application/json"),
            ("anthropic-version", "2023-06-01"),
        ],
        message,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.json();
    assert_eq!(answer["type"], "message", "{answer}");
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["content"][0]["type"], "text");
    assert_eq!(answer["content"][0]["text"], "echo: hi claude");
    assert_eq!(answer["stop_reason"], "end_turn");
    assert_eq!(answer["usage"]["output_tokens"], 3);
    // What the OpenAI-style upstream was sent: OpenAI's path and body.
    let body = upstream.received_bodies("/v1/chat/completions");
    let body: serde_json::Value = serde_json::from_slice(body.last().unwrap()).unwrap();
    assert_eq!(body["model"], "gpt-4o");
    assert_eq!(body["messages"][0]["content"], "hi claude");

    // Streamed: Anthropic's events, converted from OpenAI's as they come.
    let streamed = message.replace("\"max_tokens\"", "\"stream\":true,\"max_tokens\"");
    let (status, events) = stream_events(&gw.url("/v1/messages"), &streamed).await;
    assert_eq!(status, 200);
    let all: String = events.iter().map(|(_, text)| text.as_str()).collect();
    let kinds: Vec<&str> = all
        .lines()
        .filter_map(|line| line.strip_prefix("event: "))
        .collect();
    for kind in [
        "message_start",
        "content_block_delta",
        "message_delta",
        "message_stop",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    let text: String = all
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap())
        .filter(|event| event["type"] == "content_block_delta")
        .map(|event| event["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "echo: hi claude");
    assert_streamed(&events);
}

/// POSTs `body` and reads the answer frame by frame: the status and each
/// frame's text with when it came.
async fn stream_events(url: &str, body: &str) -> (u16, Vec<(Instant, String)>) {
    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = client().request(request).await.expect("request failed");
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the stream went quiet")
    {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push((Instant::now(), String::from_utf8_lossy(&data).into_owned()));
        }
    }
    (status, frames)
}

/// The answer came in pieces as the upstream sent them (20 ms apart), not
/// gathered whole: the first piece came well before the last.
fn assert_streamed(frames: &[(Instant, String)]) {
    assert!(frames.len() >= 3, "{} pieces", frames.len());
    let spread = frames.last().unwrap().0 - frames[0].0;
    assert!(
        spread >= Duration::from_millis(40),
        "every piece came within {spread:?}: the stream was held: {:?}",
        frames
            .iter()
            .map(|(at, text)| (*at - frames[0].0, text))
            .collect::<Vec<_>>()
    );
}

const WAF: &str = r#"
listen: "{listen}"
plugins:
  - {name: waf, wasm: "{wasm:higress_plugin_waf}"}
upstreams:
  - {name: backend, nodes: [{address: "{backend}"}]}
routes:
  - name: app
    plugins:
      - plugin: waf
        conf:
          secRules:
            - "SecRuleEngine On"
            - "SecRequestBodyAccess On"
            - "SecRule REQUEST_URI \"@streq /admin\" \"id:101,phase:1,t:lowercase,deny\""
            - "SecRule ARGS \"@detectSQLi\" \"id:102,phase:2,deny,status:403\""
            - "SecRule ARGS \"@detectXSS\" \"id:103,phase:2,t:urlDecodeUni,deny,status:403\""
            - "SecRule REQUEST_BODY \"@rx maliciouspayload\" \"id:104,phase:2,t:lowercase,deny\""
    upstream: backend
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higress_waf_refuses_sql_injection_and_xss_and_passes_the_rest() {
    let (upstream, gw) = with_upstream("backend", WAF).await;
    let c = client();
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let cases: [(&str, &str, &str, u16); 7] = [
        ("GET", "/products?id=42", "", 200),
        ("GET", "/admin", "", 403),
        ("GET", "/products?id=1%27%20OR%20%271%27%3D%271", "", 403),
        (
            "GET",
            "/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            "",
            403,
        ),
        ("POST", "/login", "user=alice&password=secret", 200),
        ("POST", "/login", "user=admin%27--&password=x", 403),
        ("POST", "/comments", "text=MaliciousPayload+inside", 403),
    ];
    for (method, path, body, status) in cases {
        let reply = send(&c, method, &gw.url(path), &form, body).await;
        assert_eq!(
            reply.status,
            status,
            "{method} {path} {body}: {}",
            reply.text()
        );
        if status == 200 {
            assert_eq!(reply.json()["upstream"], "backend");
        }
    }
    // A refused body never reaches the upstream: the WAF holds it until it
    // has judged it whole. A refused path never does either (phase 1, at the
    // headers). A query is judged by phase 2's rules, which for a request
    // without a body the plugin runs at the response's headers (Envoy calls
    // no body callback then), so those two did reach it, and their answers
    // were replaced by the 403.
    assert_eq!(
        upstream.received_bodies("/login"),
        vec![Bytes::from("user=alice&password=secret")]
    );
    assert!(upstream.received_bodies("/comments").is_empty());
    assert!(upstream.received("/admin").is_empty());
    assert_eq!(upstream.received("/products").len(), 2);
}

/// A heavy filter's pool: `max_instances` bounds the requests it filters at
/// once (a filter's instance stays with its request), instances start one
/// at a time, and after a burst the pool shrinks back to the instance used
/// last, giving its memory back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_filters_pool_is_bounded_and_shrinks_back_when_idle() {
    let yaml = WAF
        .replace(
            r#"wasm: "{wasm:higress_plugin_waf}"}"#,
            r#"wasm: "{wasm:higress_plugin_waf}", max_instances: 3, queue_timeout_ms: 10000, pool_idle_timeout_ms: 500}"#,
        )
        .replace("listen: \"{listen}\"", "listen: \"{listen}\"\nadmin: \"{admin}\"");
    let (_upstream, gw) = with_upstream("backend", &yaml).await;
    let c = client();
    // Four requests held by a slow upstream (2 s each): three instances,
    // and the fourth request waits for one of them to come back.
    let started = Instant::now();
    let slow: Vec<_> = (0..4)
        .map(|_| {
            let (c, url) = (c.clone(), gw.url("/slow"));
            tokio::spawn(async move {
                let status = send(&c, "GET", &url, &[], "").await.status;
                (status, started.elapsed())
            })
        })
        .collect();
    let waf = r#"plugin="waf",route="app""#;
    let in_use = format!("wasmgate_plugin_instances{{{waf},state=\"in_use\"}}");
    until_metric(&c, &gw, &in_use, |n| n == 3.0).await;
    // (In use counts requests holding a slot, a starting instance's too.)
    let created = format!("wasmgate_plugin_instances_created_total{{{waf}}}");
    until_metric(&c, &gw, &created, |n| n == 3.0).await;
    let memory = metric(&c, &gw, &format!("wasmgate_plugin_memory_bytes{{{waf}}}")).await;
    let mut took = Vec::new();
    for request in slow {
        let (status, elapsed) = request.await.unwrap();
        assert_eq!(status, 200);
        took.push(elapsed);
    }
    took.sort();
    assert!(
        took[3] >= took[0] + Duration::from_millis(1500),
        "the fourth request had an instance of its own: {took:?}"
    );
    assert_eq!(metric(&c, &gw, &created).await, 3.0);
    let waits = format!("wasmgate_plugin_pool_waits_total{{{waf}}}");
    assert!(metric(&c, &gw, &waits).await >= 1.0);

    // Idle past pool_idle_timeout_ms: two go, the last used stays warm.
    let idle = format!("wasmgate_plugin_instances{{{waf},state=\"idle\"}}");
    until_metric(&c, &gw, &idle, |n| n == 1.0).await;
    let expired = format!("wasmgate_plugin_instances_expired_total{{{waf}}}");
    assert_eq!(metric(&c, &gw, &expired).await, 2.0);
    let after = metric(&c, &gw, &format!("wasmgate_plugin_memory_bytes{{{waf}}}")).await;
    // (The instance kept is the one that served most, the largest; a fresh
    // one is about 7 MiB.)
    assert!(
        after < memory,
        "linear memory {memory} with three instances, {after} with one"
    );
    let clean = send(&c, "GET", &gw.url("/products?id=7"), &[], "").await;
    assert_eq!(
        clean.status,
        200,
        "the warm instance serves: {}",
        clean.text()
    );
}

/// A client that leaves before its answer does not cost a heavy filter its
/// instance: the stream's context is ended (`proxy_on_log`, `_done`,
/// `_delete`, as Envoy ends it on a reset) and the instance goes back to
/// its pool, instead of being replaced by a fresh start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_does_not_cost_the_filter_its_instance() {
    use tokio::io::AsyncWriteExt;
    let yaml = WAF.replace(
        "listen: \"{listen}\"",
        "listen: \"{listen}\"\nadmin: \"{admin}\"",
    );
    let (upstream, gw) = with_upstream("backend", &yaml).await;
    let c = client();
    let waf = r#"plugin="waf",route="app""#;
    let in_use = format!("wasmgate_plugin_instances{{{waf},state=\"in_use\"}}");
    for left in 1..=3 {
        let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
            .await
            .unwrap();
        socket
            .write_all(b"GET /slow HTTP/1.1\r\nhost: shop\r\n\r\n")
            .await
            .unwrap();
        until_metric(&c, &gw, &in_use, |n| n == 1.0).await;
        // The request reached the upstream: the WAF's request callbacks are
        // over (under load they can still be running when the instance is
        // first in use, and a client gone mid-callback is another case).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while upstream.received("/slow").len() < left {
            assert!(
                std::time::Instant::now() < deadline,
                "the request never reached the upstream"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        drop(socket); // gone while the upstream takes its two seconds
        until_metric(&c, &gw, &in_use, |n| n == 0.0).await;
    }
    let idle = format!("wasmgate_plugin_instances{{{waf},state=\"idle\"}}");
    until_metric(&c, &gw, &idle, |n| n == 1.0).await;
    let restarts = format!("wasmgate_plugin_restarts_total{{{waf}}}");
    assert_eq!(metric(&c, &gw, &restarts).await, 0.0);
    let created = format!("wasmgate_plugin_instances_created_total{{{waf}}}");
    assert_eq!(metric(&c, &gw, &created).await, 1.0);
    let clean = send(&c, "GET", &gw.url("/products?id=7"), &[], "").await;
    assert_eq!(clean.status, 200, "{}", clean.text());
}
