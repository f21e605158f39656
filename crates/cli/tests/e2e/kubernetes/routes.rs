//! Gateway API routes through a node: HTTPRoutes served, split by weight
//! and explained in their status; HTTPS listeners on TLS Secrets; GRPCRoutes
//! to gRPC services.

use super::get_host;
use crate::common::client;
use crate::common::gateway::{admin, send};
use crate::common::kube::{
    create, interface_ip, listener_condition, route, route_condition, secure_gateway, service,
    tls_secret, until, until_status, Cluster,
};
use crate::common::upstream::Upstream;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The node serves the routes of its GatewayClass's Gateway, weighted,
/// with statuses that say what is and is not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_routes_are_served_weighted_and_explained_in_their_status() {
    let mut cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let ip = interface_ip();
    let (a, b) = (
        Upstream::start_on("a", &ip).await,
        Upstream::start_on("b", &ip).await,
    );
    service(&k, "app", &[&a]).await;
    service(&k, "beta", &[&b]).await;
    let gw = cluster.node("");
    let c = client();

    // A route to one Service, and one split evenly between two.
    create::<HttpRoute>(&k, route("app", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/app"}}], "backendRefs": [{"name": "app", "port": 80}]},
        {"matches": [{"path": {"type": "PathPrefix", "value": "/split"}}],
         "backendRefs": [{"name": "app", "port": 80, "weight": 1}, {"name": "beta", "port": 80, "weight": 1}]}
    ])))
    .await;
    let reply = until_status(&c, &gw, "/app/x", 200).await;
    assert_eq!(reply.json()["upstream"], "a", "{}", reply.text());
    // A prefix matches whole segments.
    assert_eq!(send(&c, "GET", &gw.url("/apps"), &[], "").await.status, 404);
    let (before_a, before_b) = (a.hits(), b.hits());
    for _ in 0..200 {
        assert_eq!(
            send(&c, "GET", &gw.url("/split"), &[], "").await.status,
            200
        );
    }
    let (to_a, to_b) = (a.hits() - before_a, b.hits() - before_b);
    assert_eq!(to_a + to_b, 200);
    assert!((60..=140).contains(&to_a), "weights 1:1 gave {to_a}:{to_b}");
    let accepted = route_condition(&k, "app", "Accepted").await;
    assert_eq!(accepted["status"], "True", "{accepted}");
    assert_eq!(
        route_condition(&k, "app", "ResolvedRefs").await["status"],
        "True"
    );
    let gateways: Api<Gateway> = Api::default_namespaced(k.clone());
    until("the Gateway's status counts the route", || async {
        let g = serde_json::to_value(gateways.get("edge").await.unwrap()).unwrap();
        g["status"]["listeners"][0]["attachedRoutes"] == 1
            && g["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|x| x["type"] == "Programmed" && x["status"] == "True")
            })
    })
    .await;
    let classes: Api<GatewayClass> = Api::all(k.clone());
    let class = serde_json::to_value(classes.get("wasmgate").await.unwrap()).unwrap();
    assert_eq!(
        class["status"]["conditions"][0]["status"], "True",
        "{class}"
    );

    // A backend that does not exist: 500 and ResolvedRefs=False with the reason.
    create::<HttpRoute>(&k, route("missing", json!([
        {"matches": [{"path": {"type": "Exact", "value": "/missing"}}], "backendRefs": [{"name": "nowhere", "port": 80}]}
    ])))
    .await;
    until_status(&c, &gw, "/missing", 500).await;
    let resolved = route_condition(&k, "missing", "ResolvedRefs").await;
    assert_eq!(
        (resolved["status"].as_str(), resolved["reason"].as_str()),
        (Some("False"), Some("BackendNotFound")),
        "{resolved}"
    );
    // What is not supported yet says so, and is not served.
    create::<HttpRoute>(&k, route("filtered", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/filtered"}}],
         "filters": [{"type": "ExtensionRef", "extensionRef": {"group": "example.io", "kind": "Thing", "name": "x"}}],
         "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    let accepted = route_condition(&k, "filtered", "Accepted").await;
    assert_eq!(
        (accepted["status"].as_str(), accepted["reason"].as_str()),
        (Some("False"), Some("UnsupportedValue")),
        "{accepted}"
    );
    assert_eq!(
        send(&c, "GET", &gw.url("/filtered"), &[], "").await.status,
        404
    );
    // A RequestRedirect filter answers the redirect itself (302 unless said).
    create::<HttpRoute>(&k, route("moved", json!([
        {"matches": [{"path": {"type": "Exact", "value": "/old"}}],
         "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "path": {"type": "ReplaceFullPath", "replaceFullPath": "/new"}}}]}
    ])))
    .await;
    let moved = until_status(&c, &gw, "/old", 302).await;
    let location = moved.headers["location"].to_str().unwrap();
    assert!(
        location.starts_with("https://") && location.ends_with("/new"),
        "{location}"
    );
    // Header modifier filters change the request and the response.
    create::<HttpRoute>(&k, route("headers", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/headers"}}],
         "filters": [
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "X-Env", "value": "prod"}], "remove": ["x-secret"]}},
            {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "x-served-by", "value": "wasmgate"}]}}],
         "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let edited = loop {
        let reply = send(&c, "GET", &gw.url("/headers"), &[("x-secret", "1")], "").await;
        if reply.status == 200 {
            break reply;
        }
        assert!(Instant::now() < deadline, "/headers never served");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(edited.headers["x-served-by"], "wasmgate");
    let seen = a.received("/headers").pop().unwrap();
    assert_eq!(
        (seen["x-env"].to_str().unwrap(), seen.get("x-secret")),
        ("prod", None)
    );
    // RequestMirror sends a copy to another Service.
    create::<HttpRoute>(&k, route("mirrored", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/mirrored"}}],
         "filters": [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "beta", "port": 80}}}],
         "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    let mirrored = until_status(&c, &gw, "/mirrored", 200).await;
    assert_eq!(mirrored.json()["upstream"], "a");
    until("the copy reaches the mirror", || async {
        !b.received("/mirrored").is_empty()
    })
    .await;
    // URLRewrite replaces the matched prefix and the host; a query
    // parameter match takes only the requests that carry it.
    create::<HttpRoute>(
        &k,
        route(
            "rewritten",
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/shop"},
                              "queryParams": [{"name": "tier", "value": "gold"}]}],
                 "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example",
                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/store"}}}],
                 "backendRefs": [{"name": "app", "port": 80}]}
            ]),
        ),
    )
    .await;
    let rewritten = until_status(&c, &gw, "/shop/items?tier=gold", 200).await;
    let echo = rewritten.json();
    assert_eq!(echo["path"], "/store/items?tier=gold", "{echo}");
    assert_eq!(echo["headers"]["host"], "internal.example", "{echo}");
    assert_eq!(
        send(&c, "GET", &gw.url("/shop/items?tier=silver"), &[], "")
            .await
            .status,
        404
    );
    // The admin API does not write here: the resources are the truth.
    let put = send(
        &c,
        "PUT",
        &gw.admin_url("/routes/x"),
        &[("x-wasmgate-admin", "1")],
        r#"{"respond": {"status": 200}}"#,
    )
    .await;
    assert!(put.status >= 400, "{}", put.text());
    assert!(put.text().contains("kubectl"), "{}", put.text());

    // A deleted route goes away.
    let routes: Api<HttpRoute> = Api::default_namespaced(k.clone());
    routes
        .delete("missing", &DeleteParams::default())
        .await
        .unwrap();
    until_status(&c, &gw, "/missing", 404).await;

    // The API server killed under load: the node keeps serving what it has.
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let load = {
        let (c, url, answered) = (c.clone(), gw.url("/app/x"), answered.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..300 {
                statuses.push(send(&c, "GET", &url, &[], "").await.status);
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            statuses
        })
    };
    // Killed with the load under way.
    while answered.load(std::sync::atomic::Ordering::Relaxed) < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.api.kill();
    let statuses = load.await.unwrap();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(
        send(&c, "GET", &gw.url("/split"), &[], "").await.status,
        200
    );
    // Meanwhile /status and /cluster say which watches are failing, and why.
    let watches = |view: Value| view["watches"].as_object().cloned().unwrap_or_default();
    until("the watches say the API server is gone", || async {
        let view = admin(&c, &gw, "GET", "/cluster", "").await.json();
        let failing = watches(view.clone())
            .values()
            .filter(|w| w["state"] == "retrying" && w["last_error"].is_string())
            .count();
        failing > 0 && view["unhealthy_watches"].as_u64() == Some(failing as u64)
    })
    .await;
    let status = admin(&c, &gw, "GET", "/status", "").await.json();
    let http_routes = &status["config"]["kubernetes"]["watches"]["HTTPRoute"];
    assert!(http_routes["errors"].as_u64() >= Some(1), "{status}");

    // The API server back: its new watch cache no longer has the watches'
    // resource versions (410 Expired). They list again at once, and a new
    // route serves within seconds (it took 30-87 s while a 410 waited out
    // a backoff of up to 30 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.api.start_again();
    let back = Instant::now();
    create::<HttpRoute>(&k, route("after", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/after"}}], "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    until_status(&c, &gw, "/after", 200).await;
    assert!(
        back.elapsed() < Duration::from_secs(15),
        "a new route served {:?} after the API server came back",
        back.elapsed()
    );
    until("every watch is watching again", || async {
        let view = admin(&c, &gw, "GET", "/cluster", "").await.json();
        view["unhealthy_watches"] == 0 && watches(view).values().all(|w| w["state"] == "watching")
    })
    .await;
    let view = admin(&c, &gw, "GET", "/cluster", "").await.json();
    let relisted = watches(view.clone())
        .values()
        .map(|w| w["relists"].as_u64().unwrap())
        .sum::<u64>();
    assert!(relisted > 0, "no watch re-listed after 410: {view}");
}

/// HTTPS listeners take their certificates from TLS Secrets, chosen by
/// SNI, and follow them (a Secret created later or rotated serves new
/// handshakes); a route attached only to HTTPS listeners is not served in
/// plain HTTP; a listener whose Secret is missing says so. A GRPCRoute
/// sends every kind of gRPC call to its Service over h2c, its header
/// modifier reaching the server as metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_listeners_use_tls_secrets_and_grpc_routes_reach_grpc_services() {
    use crate::common::peers::{client as peer_client, Peer};
    use crate::common::tls::curl;
    use gateway_api::grpcroutes::GrpcRoute;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Patch, PatchParams};
    use wasmgate_testkit::pki::{KeyType, Pki};

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let ip = interface_ip();
    let app = Upstream::start_on("app", &ip).await;
    service(&k, "app", &[&app]).await;
    let first_ca = Pki::new("first-ca");
    let shop = first_ca.server(&["shop.example.com"], KeyType::EcdsaP256, 1, 1);
    create::<Secret>(&k, tls_secret("shop-tls", &shop)).await;
    secure_gateway(&k, "shop-tls", "api-tls").await;
    let tls_port = crate::common::free_port();
    let gw = cluster.node(&format!(
        "listeners: [{{address: \"127.0.0.1:{tls_port}\", tls: {{}}}}]\n"
    ));
    let c = client();

    // Served over HTTPS with the Secret's certificate, HTTP/2 by ALPN; not
    // in plain HTTP, which no listener of the route's Gateway speaks.
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = loop {
        let got = curl("shop.example.com", tls_port, "/x", &first_ca.ca, &[]);
        if got.status == 200 || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (got.status, got.version.as_str()),
        (200, "2"),
        "{}",
        got.stderr
    );
    assert!(got.body.contains("\"upstream\":\"app\""), "{}", got.body);
    let plain = get_host(&c, &gw, "/x", "shop.example.com").await;
    assert_eq!(plain.status, 404, "{}", plain.text());

    // The listener whose Secret does not exist says so; the Secret created,
    // it serves.
    let listener_condition = |name: &'static str, kind: &'static str| {
        let k = k.clone();
        async move {
            let c = listener_condition(&k, "secure", name, kind).await?;
            Some((
                c["status"].as_str()?.to_string(),
                c["reason"].as_str()?.to_string(),
            ))
        }
    };
    until("the missing Secret is said", || async {
        listener_condition("api", "ResolvedRefs").await
            == Some(("False".into(), "InvalidCertificateRef".into()))
    })
    .await;
    assert_eq!(
        listener_condition("shop", "Programmed").await,
        Some(("True".into(), "Programmed".into()))
    );
    let api_cert = first_ca.server(&["api.example.com"], KeyType::Rsa2048, 2, 1);
    create::<Secret>(&k, tls_secret("api-tls", &api_cert)).await;
    until("the new Secret serves", || async {
        curl("api.example.com", tls_port, "/", &first_ca.ca, &[]).status == 200
    })
    .await;
    assert_eq!(
        listener_condition("api", "ResolvedRefs").await,
        Some(("True".into(), "ResolvedRefs".into()))
    );

    // A rotated Secret (another CA's certificate) serves new handshakes.
    let second_ca = Pki::new("second-ca");
    let rotated = second_ca.server(&["shop.example.com"], KeyType::EcdsaP256, 3, 1);
    let secrets: Api<Secret> = Api::default_namespaced(k.clone());
    let patch =
        json!({"stringData": {"tls.crt": rotated.cert_pem(), "tls.key": rotated.key_pem()}});
    secrets
        .patch("shop-tls", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    until("the rotated certificate is served", || async {
        curl("shop.example.com", tls_port, "/", &second_ca.ca, &[]).status == 200
    })
    .await;

    // A listener that takes routes from namespaces by label; the route in
    // such a namespace reaches a Service of `default` once a ReferenceGrant
    // there allows it.
    {
        use gateway_api::referencegrants::ReferenceGrant;
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::PostParams;
        let namespaces: Api<Namespace> = Api::all(k.clone());
        let team: Namespace = serde_json::from_value(
            json!({"metadata": {"name": "team-a", "labels": {"team": "a"}}}),
        )
        .unwrap();
        namespaces
            .create(&PostParams::default(), &team)
            .await
            .unwrap();
        create::<Gateway>(&k, json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "shared"},
            "spec": {"gatewayClassName": "wasmgate", "listeners": [
                {"name": "teams", "port": 80, "protocol": "HTTP", "hostname": "teams.example.com",
                 "allowedRoutes": {"namespaces": {"from": "Selector",
                     "selector": {"matchLabels": {"team": "a"}}}}}]}
        }))
        .await;
        let team_routes: Api<HttpRoute> = Api::namespaced(k.clone(), "team-a");
        let team_route: HttpRoute = serde_json::from_value(json!({
            "metadata": {"name": "team-app"},
            "spec": {"parentRefs": [{"name": "shared", "namespace": "default"}],
                     "rules": [{"backendRefs": [{"name": "app", "namespace": "default", "port": 80}]}]}
        }))
        .unwrap();
        team_routes
            .create(&PostParams::default(), &team_route)
            .await
            .unwrap();
        let resolved = || async {
            let r = serde_json::to_value(team_routes.get("team-app").await.unwrap()).unwrap();
            let conditions = r["status"]["parents"][0]["conditions"].clone();
            let find = |kind: &str| {
                (conditions.as_array().into_iter().flatten())
                    .find(|c| c["type"] == kind)
                    .map(|c| {
                        (
                            c["status"].as_str().unwrap().to_string(),
                            c["reason"].as_str().unwrap().to_string(),
                        )
                    })
            };
            (find("Accepted"), find("ResolvedRefs"))
        };
        until(
            "the team's route is accepted, its backend not permitted",
            || async {
                resolved().await
                    == (
                        Some(("True".into(), "Accepted".into())),
                        Some(("False".into(), "RefNotPermitted".into())),
                    )
            },
        )
        .await;
        create::<ReferenceGrant>(&k, json!({
            "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": "team-a-to-app"},
            "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "team-a"}],
                     "to": [{"group": "", "kind": "Service", "name": "app"}]}
        }))
        .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while get_host(&c, &gw, "/t", "teams.example.com").await.status != 200 {
            assert!(
                Instant::now() < deadline,
                "the granted route was never served"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    // A GRPCRoute on the plain listener of `edge`, to a gRPC server.
    let echo = Peer::serve_on("grpc_peer.py", &ip, &[]);
    crate::common::kube::service_at(&k, "echo", &[echo.address()], None).await;
    create::<GrpcRoute>(&k, json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
        "metadata": {"name": "echo"},
        "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["grpc.example.com"], "rules": [
            {"matches": [{"method": {"service": "test.Echo"}}],
             "filters": [{"type": "RequestHeaderModifier",
                          "requestHeaderModifier": {"set": [{"name": "x-via", "value": "wasmgate"}]}}],
             "backendRefs": [{"name": "echo", "port": 80}]}]}
    }))
    .await;
    let grpc = |scenario: &'static str| {
        let target = format!("127.0.0.1:{}", gw.port);
        peer_client(
            "grpc_peer.py",
            vec![target, scenario.into(), "authority=grpc.example.com".into()],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while grpc("status").await.report["code"] != "OK" {
        assert!(Instant::now() < deadline, "the GRPCRoute was never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let run = grpc("all").await;
    assert!(run.ok, "{}", run.report);
    assert_eq!(
        run.report["metadata_seen"]["x-via"], "wasmgate",
        "{}",
        run.report
    );
    let routes: Api<GrpcRoute> = Api::default_namespaced(k.clone());
    until("the GRPCRoute's status is written", || async {
        let r = serde_json::to_value(routes.get("echo").await.unwrap()).unwrap();
        (r["status"]["parents"][0]["conditions"].as_array()).is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Accepted" && c["status"] == "True")
        })
    })
    .await;
    // A gRPC call no route takes gets a gRPC status, not an HTTP error.
    let target = format!("127.0.0.1:{}", gw.port);
    let run = peer_client(
        "grpc_peer.py",
        vec![
            target,
            "status".into(),
            "authority=nowhere.example.com".into(),
        ],
    )
    .await;
    assert_eq!(run.report["code"], "NOT_FOUND", "{}", run.report);
}
