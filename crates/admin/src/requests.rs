//! `GET /requests?route=NAME&status=5xx|404&limit=N`: the last requests the
//! access log wrote (docs/observability.md), newest first, for the
//! dashboard's request list. The access log keeps the last few hundred in
//! memory; with the log off there are none, and the answer says so.
//!
//! `GET /errors/{request_id}`: the whole error the gateway answered a
//! request with, of which the client got only the kind and the id
//! (docs/security.md, "What clients are told").

use hyper::StatusCode;
use serde_json::json;
use wasmgate_observe::access_log::{self, RECENT};

use super::Reply;

pub(super) fn recent(query: &str) -> Reply {
    let mut route: Option<String> = None;
    let mut status: Option<StatusFilter> = None;
    let mut limit = 100;
    for (key, value) in query.split('&').filter_map(|kv| kv.split_once('=')) {
        let value = percent_decode(value);
        match key {
            "route" if !value.is_empty() => route = Some(value),
            "status" if !value.is_empty() => match StatusFilter::parse(&value) {
                Some(filter) => status = Some(filter),
                None => {
                    return Reply::error(
                        StatusCode::BAD_REQUEST,
                        format!("status: `{value}` is neither a status (404) nor a class (5xx)"),
                    )
                }
            },
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=RECENT).contains(&n) => limit = n,
                _ => {
                    return Reply::error(
                        StatusCode::BAD_REQUEST,
                        format!("limit must be 1 to {RECENT}"),
                    )
                }
            },
            _ => {}
        }
    }
    let Some(log) = access_log::global() else {
        return Reply::json(StatusCode::OK, json!({"access_log": false, "requests": []}));
    };
    let keep = |route_name: &str, code: u16| {
        route.as_ref().is_none_or(|r| route_name == r) && status.is_none_or(|s| s.accepts(code))
    };
    Reply::json(
        StatusCode::OK,
        json!({"access_log": true, "requests": log.recent(keep, limit)}),
    )
}

#[derive(Clone, Copy)]
enum StatusFilter {
    Exact(u16),
    /// 1 to 5: `1xx` ... `5xx`.
    Class(u16),
}

impl StatusFilter {
    fn parse(text: &str) -> Option<StatusFilter> {
        match text.as_bytes() {
            [c @ b'1'..=b'5', b'x', b'x'] => Some(StatusFilter::Class((c - b'0') as u16)),
            _ => text
                .parse::<u16>()
                .ok()
                .filter(|s| (100..=599).contains(s))
                .map(StatusFilter::Exact),
        }
    }

    fn accepts(self, status: u16) -> bool {
        match self {
            StatusFilter::Exact(s) => s == status,
            StatusFilter::Class(c) => status / 100 == c,
        }
    }
}

/// A query value, `+` and `%XX` decoded.
fn percent_decode(text: &str) -> String {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

pub(super) fn error_detail(request_id: &str) -> Reply {
    let Ok(id) = request_id.parse::<u64>() else {
        return Reply::error(
            StatusCode::BAD_REQUEST,
            format!("`{request_id}` is not a request id (the number an error answer names)"),
        );
    };
    match wasmgate_gateway::error_response::recent_errors::find(id) {
        Some((status, error)) => Reply::json(
            StatusCode::OK,
            json!({"request_id": id, "status": status, "error": error}),
        ),
        None => Reply::error(
            StatusCode::NOT_FOUND,
            format!(
                "no error answered to request {id} among the last {} (the log has older ones)",
                wasmgate_gateway::error_response::recent_errors::KEPT
            ),
        ),
    }
}
