//! What every `/mcp` request passes before the protocol reads it: an `Origin` check (a
//! browser page of another site must not drive the server), then the same admission as
//! GraphQL (the credential authenticated on every request, so a key revoked mid-session
//! is refused at its next request; the caller's and its tenant's rates charged), then the
//! token's audience. No or a bad credential is 401 with a `WWW-Authenticate` that points
//! to the protected resource metadata. The caller reaches the tools as a request
//! extension; a JWT caller is on the `mcp` channel, an API key keeps `service_api`.
use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use entity::AccessChannel;
use serde_json::json;

use crate::error::ApiError;
use crate::http::admission::admit_for;
use crate::state::AppState;

/// Admits the request or answers it.
pub async fn guard(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN)
        && !origin_allowed(&state, origin)
    {
        return json_rpc_error(StatusCode::FORBIDDEN, -32600, "this Origin may not call /mcp");
    }
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(address)| address.ip());
    // RFC 8707: a JWT may name this resource as its audience (or none, or an identity
    // provider's configured one); one naming only something else does not authenticate.
    let resource = super::urls::resource(&state.public_url);
    let admitted = match admit_for(&state, request.headers(), peer, Some(&resource)).await {
        Ok(admitted) => admitted,
        Err(refused) => return refusal(&state, refused.error),
    };
    let Some(mut principal) = admitted.principal else {
        return unauthorized(&state, "a bearer token is required");
    };
    if principal.api_key.is_none() {
        principal.channel = AccessChannel::Mcp;
    }
    request.extensions_mut().insert(principal);
    if request.method() == axum::http::Method::POST && request.uri().path() == super::urls::PATH {
        request = match well_formed(request, state.settings.body_limit()).await {
            Ok(request) => request,
            Err(refused) => return refused,
        };
    }
    next.run(request).await
}

/// A POST body read (at most `limit` bytes: a larger one is refused as soon as the limit
/// is passed) and checked to be JSON-RPC before the protocol sees it: malformed JSON is
/// 400 with `-32700`, JSON that is no JSON-RPC message as MCP shapes them (an `id` that is
/// not a string or an integer, `params` that are not an object, or a batch, which the
/// revisions served here do not have) 400 with `-32600`.
async fn well_formed(request: Request, limit: usize) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        json_rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
            &format!("BAD_USER_INPUT: the request body is larger than {limit} bytes"),
        )
    })?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|error| json_rpc_error(StatusCode::BAD_REQUEST, -32700, &format!("parse error: {error}")))?;
    // MCP narrows JSON-RPC: an id is a string or an integer (never null), and params,
    // when given, are an object.
    let id_ok = |message: &serde_json::Value| match message.get("id") {
        None | Some(serde_json::Value::String(_)) => true,
        Some(serde_json::Value::Number(number)) => number.is_i64() || number.is_u64(),
        Some(_) => false,
    };
    let is_message = |message: &serde_json::Value| {
        message.get("jsonrpc").and_then(serde_json::Value::as_str) == Some("2.0")
            && id_ok(message)
            && message.get("params").is_none_or(serde_json::Value::is_object)
            && (message.get("method").is_some_and(serde_json::Value::is_string)
                || message.get("result").is_some()
                || message.get("error").is_some())
    };
    // One message per request: the protocol revisions served here have no batches.
    let valid = value.is_object() && is_message(&value);
    if !valid {
        return Err(json_rpc_error(StatusCode::BAD_REQUEST, -32600, "invalid request: not a JSON-RPC 2.0 message"));
    }
    // As at GraphQL: a string no backend can store is refused before anything reads it.
    if !storable(&value) {
        return Err(json_rpc_error(
            StatusCode::BAD_REQUEST,
            -32602,
            "BAD_USER_INPUT: strings must not contain NUL (U+0000) characters",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The hosts `/mcp` answers for: the public URL's and loopback's (DNS rebinding stops at
/// any other `Host`).
pub fn allowed_hosts(public_url: &str) -> Vec<String> {
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if let Ok(uri) = public_url.parse::<axum::http::Uri>()
        && let Some(authority) = uri.authority()
    {
        hosts.push(authority.host().trim_matches(|c| c == '[' || c == ']').to_owned());
        hosts.push(authority.as_str().to_owned());
    }
    hosts
}

/// Whether a page of `origin` may call: this server's own origin (its public URL's) or
/// one of `KFS_CORS_ORIGINS`.
fn origin_allowed(state: &AppState, origin: &HeaderValue) -> bool {
    let Ok(origin) = origin.to_str() else { return false };
    let origin = origin.trim_end_matches('/');
    let own = state.public_url.trim_end_matches('/');
    origin.eq_ignore_ascii_case(own)
        || state.settings.cors_origins.iter().any(|allowed| allowed.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

/// A refused admission: 401 for a credential that does not authenticate, the error's own
/// status otherwise (429 with `Retry-After`, 503).
fn refusal(state: &AppState, error: ApiError) -> Response {
    match error {
        ApiError::Unauthenticated => unauthorized(state, "the bearer token is not valid"),
        ApiError::RateLimited { retry_after_secs } => {
            let mut response = json_rpc_error(
                StatusCode::TOO_MANY_REQUESTS,
                -32000,
                &format!("RATE_LIMITED: rate limit exceeded; try again in {retry_after_secs} s"),
            );
            if let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        other => json_rpc_error(StatusCode::SERVICE_UNAVAILABLE, -32603, &format!("{}: {other}", other.code())),
    }
}

/// 401 with the `WWW-Authenticate` challenge MCP clients follow to the metadata document.
fn unauthorized(state: &AppState, message: &str) -> Response {
    let mut response = json_rpc_error(StatusCode::UNAUTHORIZED, -32001, &format!("UNAUTHENTICATED: {message}"));
    let challenge = format!("Bearer resource_metadata=\"{}\"", super::urls::metadata(&state.public_url));
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// A JSON-RPC error body (no id: the request was not read) with `status`.
fn json_rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": null, "error": { "code": code, "message": message } });
    let mut response = (status, Body::from(body.to_string())).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Whether every string in `value` (keys included, at any depth) may be stored:
/// PostgreSQL refuses NUL in TEXT and JSONB.
fn storable(value: &serde_json::Value) -> bool {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::String(text) if text.contains('\0') => return false,
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(fields) => {
                if fields.keys().any(|key| key.contains('\0')) {
                    return false;
                }
                stack.extend(fields.values());
            }
            _ => {}
        }
    }
    true
}
