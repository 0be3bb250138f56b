//! `/ops`: the operations page, for the subjects `KFS_OPERATOR_SUBJECTS` names. The page
//! and its script come from the binary under a same-origin policy; it asks for a bearer
//! token, keeps it in memory (no cookie, so no CSRF), and follows `/ops/stream`: a
//! server-sent event per two seconds with the queue by stage, throughput, running tasks,
//! recent failures, the outbox (dead rows with a redeliver action), sockets and
//! subscriptions, and the busiest tenants. Ids and counts only: never a query, answer,
//! evidence or credential. Every data call from anyone else answers 404, as for a page
//! that does not exist.
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;
use uuid::Uuid;

use crate::auth::authenticate;
use crate::state::AppState;
use worker::app::audit;
use worker::app::operations;

/// How often the stream sends a snapshot.
const EVERY: Duration = Duration::from_secs(2);

/// `GET /ops`: the page.
pub async fn page(headers: HeaderMap) -> Response {
    let mut response = Html(include_str!("ops.html")).into_response();
    secure(&mut response, &headers);
    response
}

/// `GET /ops/app.js`: its script.
pub async fn script() -> Response {
    let mut response =
        ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("ops.js")).into_response();
    response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

fn secure(response: &mut Response, headers: &HeaderMap) {
    let policy =
        super::graphiql::content_security_policy(headers.get(header::HOST).and_then(|host| host.to_str().ok()));
    let set = response.headers_mut();
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        set.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    set.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    set.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    set.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The operator the request's credential stands for, or `None` (answered 404, as for a
/// page that does not exist); each operation checks the operator rule again itself.
async fn operator(state: &AppState, headers: &HeaderMap) -> Option<worker::app::Principal> {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
    match authenticate(&state.db, &state.identity, authorization).await {
        Ok(Some(principal)) if state.is_operator(&principal) => Some(principal),
        _ => None,
    }
}

/// What an operator is told of a failed read: the cause itself (operators run the service;
/// nothing of a tenant is in it).
fn describe(error: &worker::app::AppError) -> String {
    match error {
        worker::app::AppError::Unavailable(cause) | worker::app::AppError::Internal(cause) => format!("{cause:#}"),
        other => other.to_string(),
    }
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found").into_response()
}

/// Every data route under `/ops/`: the caller must be an operator before anything about
/// the path is looked at, so a malformed id, an unknown path and a wrong method answer
/// anyone else exactly as a page that does not exist. For operators: `GET /ops/stream`
/// and `POST /ops/outbox/{id}/redeliver`.
pub async fn data(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    Path(path): Path<String>,
) -> Response {
    let Some(principal) = operator(&state, &headers).await else {
        return not_found();
    };
    let segments: Vec<&str> = path.split('/').collect();
    match (method, segments.as_slice()) {
        (Method::GET, ["stream"]) => stream(state, principal),
        (Method::POST, ["outbox", id, "redeliver"]) => match id.parse::<Uuid>() {
            Ok(id) => redeliver(state, &headers, principal, id).await,
            Err(_) => not_found(),
        },
        _ => not_found(),
    }
}

/// `GET /ops/stream`: a snapshot every two seconds, as server-sent events, until the
/// operator's token expires.
fn stream(state: AppState, principal: worker::app::Principal) -> Response {
    // Each snapshot is authorized when it is read: the stream ends when the token does.
    let events = futures_util::stream::unfold((state, principal, true), |(state, principal, first)| async move {
        if !first {
            tokio::time::sleep(EVERY).await;
        }
        let data = match operations::snapshot(&state.app, &principal).await {
            Ok(snapshot) => {
                let sockets: Vec<_> = crate::gauges::open_counts()
                    .into_iter()
                    .map(|(name, kind, count)| json!({ "name": name, "kind": kind, "count": count }))
                    .collect();
                json!({ "snapshot": snapshot, "open": sockets })
            }
            // What it authorized has ended (the token expired): so does the stream.
            Err(worker::app::AppError::Unauthenticated | worker::app::AppError::Forbidden) => return None,
            Err(error) => json!({ "error": format!("the database did not answer: {}", describe(&error)) }),
        };
        let event = Bytes::from(format!("data: {data}\n\n"));
        Some((Ok::<_, Infallible>(event), (state, principal, false)))
    });
    let mut response = Response::new(Body::from_stream(events));
    let set = response.headers_mut();
    set.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    set.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `POST /ops/outbox/{id}/redeliver`: makes a dead outbox row pending again.
async fn redeliver(state: AppState, headers: &HeaderMap, principal: worker::app::Principal, id: Uuid) -> Response {
    let request_id = crate::request_id::of(headers);
    let actor = audit::Actor { principal: &principal, request_id: request_id.as_ref().map(|id| id.0.as_str()) };
    match operations::redeliver_outbox(&state.app, actor, id).await {
        Ok(true) => axum::Json(json!({ "redelivered": true })).into_response(),
        Ok(false) => not_found(),
        Err(error) => {
            tracing::error!(error = %error, "redelivering an outbox row failed");
            (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response()
        }
    }
}
