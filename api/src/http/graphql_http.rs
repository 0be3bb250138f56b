//! GraphQL over HTTP, written to the spec (the graphql-http audit runs in the test
//! suite): strict request-parameter checks, content negotiation, spec status codes, no
//! mutations over GET, and a body-size limit that answers with a GraphQL error.
use crate::error::ToGql as _;
use async_graphql::parser::types::OperationType;
use async_graphql::{Request, Variables};
use async_graphql_axum::GraphQLResponse;
use axum::body::Body;
use axum::body::HttpBody as _;
use std::net::{IpAddr, SocketAddr};

use axum::Extension;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse as _;
use axum::response::Response;
use serde_json::{Map, Value, json};
use tracing::Instrument as _;

use super::admission::{Admitted, Refused};
use super::json_size::{self, MAX_JSON_VALUES};
use super::media::Media;
use crate::graphql::CostCheck;
use crate::graphql::error_codes::is_request_error;
use crate::graphql::{AppSchema, guard, operation_span};
use crate::state::AppState;

/// Everything a GraphQL handler needs.
#[derive(Clone)]
pub struct GraphqlEndpoint {
    /// The shared state (pool, settings).
    pub state: AppState,
    /// The executable schema.
    pub schema: AppSchema,
    /// The multipart bodies being read, bounded.
    pub uploads: std::sync::Arc<super::multipart::UploadSlots>,
}

/// `POST /graphql` with an `application/json` body. The caller is authenticated and
/// charged its rate before a byte of the body is read: a credential that does not
/// authenticate is answered (or refused for its address's rate) from the headers alone.
pub async fn graphql_post(
    State(endpoint): State<GraphqlEndpoint>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let media = Media::negotiate(&headers);
    let peer = peer.map(|Extension(ConnectInfo(address))| address.ip());
    let caller = match admit(&endpoint, &headers, peer, media).await {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    let refused = |response: Response| with_rate_headers(response, &caller.checked);
    if super::multipart::is_multipart(&headers) {
        use super::multipart::answer_then_drain;
        // Only a caller's upload is worth reading: every upload mutation needs one, and a
        // body nobody may send holds nothing of this process's while it stalls.
        let Some(principal) = &caller.principal else {
            let error =
                crate::error::ApiError::Unauthenticated.to_gql().into_server_error(async_graphql::Pos::default());
            let mut response = respond(media, async_graphql::Response::from_errors(vec![error]));
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            return refused(answer_then_drain(response, body));
        };
        let caller_key = format!("{}\u{0}{}", principal.tenant_id, principal.subject_id);
        let timeout = std::time::Duration::from_millis(endpoint.state.settings.upload_timeout_ms.max(1));
        let waited = std::time::Instant::now();
        let Ok(_slot) = tokio::time::timeout(timeout, endpoint.uploads.take(&caller_key)).await else {
            let message = format!(
                "the upload waited {} s for its turn (KFS_MAX_CONCURRENT_UPLOADS, KFS_UPLOAD_TIMEOUT_MS); try again",
                timeout.as_secs()
            );
            let body_json = json!({ "errors": [{ "message": message, "extensions": { "code": "BAD_USER_INPUT" } }] });
            let mut response = media.respond(StatusCode::REQUEST_TIMEOUT, &body_json);
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            return refused(response);
        };
        let limits = super::multipart::Limits {
            max_file_bytes: endpoint.state.settings.max_upload_bytes,
            max_operations_bytes: endpoint.state.settings.body_limit(),
        };
        let timeout = timeout.saturating_sub(waited.elapsed());
        let request = match super::multipart::receive(&headers, media, body, limits, timeout, parse_body).await {
            Ok(request) => request,
            Err(response) => return refused(response),
        };
        let request = match guard::prepare(request).await {
            Ok(request) => request,
            Err(error) => return refused(respond(media, async_graphql::Response::from_errors(vec![error]))),
        };
        return execute(&endpoint, &headers, media, request, caller).await;
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.to_ascii_lowercase().starts_with("application/json"));
    if !is_json {
        let body = json!({ "errors": [{ "message": "POST bodies must be application/json (or multipart/form-data for a file upload)", "extensions": { "code": "BAD_USER_INPUT" } }] });
        return refused(media.respond(StatusCode::UNSUPPORTED_MEDIA_TYPE, &body));
    }
    let limit = endpoint.state.settings.body_limit();
    let too_large = || {
        let message = format!("request body is larger than {limit} bytes");
        let body = json!({ "errors": [{ "message": message, "extensions": { "code": "BAD_USER_INPUT" } }] });
        media.respond(StatusCode::PAYLOAD_TOO_LARGE, &body)
    };
    let bytes = match read_within(body, limit).await {
        Ok(bytes) => bytes,
        // Answered now; what the client still sends is read behind the answer.
        Err(Some(rest)) => return refused(super::multipart::answer_then_drain(too_large(), rest)),
        Err(None) => return refused(media.request_error("the request body could not be read", "BAD_USER_INPUT")),
    };
    let request = match parse_body(bytes).await {
        Ok(request) => request,
        Err(message) => return refused(media.request_error(&message, "BAD_USER_INPUT")),
    };
    let request = match guard::prepare(request).await {
        Ok(request) => request,
        Err(error) => return refused(respond(media, async_graphql::Response::from_errors(vec![error]))),
    };
    execute(&endpoint, &headers, media, request, caller).await
}

/// The body's bytes, or, past `limit` (announced by `Content-Length` or met while
/// reading), the rest of the body for draining; `Err(None)` when it could not be read.
async fn read_within(body: Body, limit: usize) -> Result<axum::body::Bytes, Option<Body>> {
    if body.size_hint().lower() > limit as u64 {
        return Err(Some(body));
    }
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = futures_util::StreamExt::next(&mut stream).await {
        let chunk = chunk.map_err(|_| None)?;
        if bytes.len() + chunk.len() > limit {
            return Err(Some(Body::from_stream(stream)));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes.into())
}

/// Bodies above this size are parsed on the blocking pool: a body may be several
/// megabytes (a document's content), and parsing it must not stall the async threads.
const PARSE_ON_POOL_BYTES: usize = 64 * 1024;

/// The GraphQL request a POST body carries, or why it carries none.
async fn parse_body(bytes: axum::body::Bytes) -> Result<Request, String> {
    fn parse(bytes: &[u8]) -> Result<Request, String> {
        if !json_size::within(bytes, MAX_JSON_VALUES) {
            return Err(format!("the request body holds more than {MAX_JSON_VALUES} JSON values"));
        }
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(parameters)) => request_from_parameters(parameters),
            Ok(_) => Err("the request body must be a JSON object".to_owned()),
            Err(_) => Err("the request body is not valid JSON".to_owned()),
        }
    }
    if bytes.len() < PARSE_ON_POOL_BYTES {
        return parse(&bytes);
    }
    tokio::task::spawn_blocking(move || parse(&bytes))
        .await
        .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
}

/// `GET /graphql?query=…`: queries only; a mutation answers 405.
pub async fn graphql_get(
    State(endpoint): State<GraphqlEndpoint>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let media = Media::negotiate(&headers);
    let peer = peer.map(|Extension(ConnectInfo(address))| address.ip());
    let caller = match admit(&endpoint, &headers, peer, media).await {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    let pairs: Vec<(String, String)> =
        query.as_deref().map(|raw| serde_urlencoded::from_str(raw).unwrap_or_default()).unwrap_or_default();
    let mut parameters = Map::new();
    for (name, value) in pairs {
        let value = match name.as_str() {
            "variables" | "extensions" if !json_size::within(value.as_bytes(), MAX_JSON_VALUES) => {
                let message = format!("{name} holds more than {MAX_JSON_VALUES} JSON values");
                return media.request_error(&message, "BAD_USER_INPUT");
            }
            "variables" | "extensions" => match serde_json::from_str(&value) {
                Ok(parsed) => parsed,
                Err(_) => return media.request_error(&format!("{name} must be a JSON object"), "BAD_USER_INPUT"),
            },
            _ => Value::String(value),
        };
        parameters.insert(name, value);
    }
    let request = match request_from_parameters(parameters) {
        Ok(request) => request,
        Err(message) => return media.request_error(&message, "BAD_USER_INPUT"),
    };
    let mut request = match guard::prepare(request).await {
        Ok(request) => request,
        Err(error) => return respond(media, async_graphql::Response::from_errors(vec![error])),
    };
    if !is_query_operation(&mut request) {
        let body = json!({ "errors": [{ "message": "only queries may be sent with GET; use POST", "extensions": { "code": "BAD_USER_INPUT" } }] });
        let mut response = media.respond(StatusCode::METHOD_NOT_ALLOWED, &body);
        response.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        return response;
    }
    execute(&endpoint, &headers, media, request, caller).await
}

/// Checks the spec's request parameters: `query` a string; `operationName` a string or
/// null; `variables` and `extensions` maps or null.
fn request_from_parameters(mut parameters: Map<String, Value>) -> Result<Request, String> {
    let query = match parameters.remove("query") {
        Some(Value::String(query)) => query,
        Some(_) => return Err("query must be a string".to_owned()),
        None => return Err("the query parameter is missing".to_owned()),
    };
    let mut request = Request::new(query);
    match parameters.remove("operationName") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) => request = request.operation_name(name),
        Some(_) => return Err("operationName must be a string".to_owned()),
    }
    match parameters.remove("variables") {
        None | Some(Value::Null) => {}
        Some(variables @ Value::Object(_)) => request = request.variables(Variables::from_json(variables)),
        Some(_) => return Err("variables must be a map".to_owned()),
    }
    match parameters.get("extensions") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(_) => return Err("extensions must be a map".to_owned()),
    }
    Ok(request)
}

/// Whether the operation the request selects is a query (the guard parsed the document
/// already, so this reads it without parsing again).
fn is_query_operation(request: &mut Request) -> bool {
    let wanted = request.operation_name.clone();
    let wanted = wanted.as_deref();
    let Ok(document) = request.parsed_query() else {
        return true;
    };
    document
        .operations
        .iter()
        .filter(|(name, _)| wanted.is_none() || name.map(|name| name.as_str()) == wanted)
        .all(|(_, operation)| operation.node.ty == OperationType::Query)
}

/// Admits the request (see [`super::admission`]), or answers the refusal as GraphQL.
async fn admit(
    endpoint: &GraphqlEndpoint,
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    media: Media,
) -> Result<Admitted, Box<Response>> {
    super::admission::admit(&endpoint.state, headers, peer).await.map_err(|Refused { error, checked }| {
        let error = error.to_gql().into_server_error(async_graphql::Pos::default());
        Box::new(with_rate_headers(respond(media, async_graphql::Response::from_errors(vec![error])), &checked))
    })
}

/// Executes a request the guard prepared for an admitted caller, and writes the response
/// with the negotiated media type.
async fn execute(
    endpoint: &GraphqlEndpoint,
    headers: &HeaderMap,
    media: Media,
    request: Request,
    caller: Admitted,
) -> Response {
    let max_bytes = endpoint.state.settings.max_response_bytes;
    let Admitted { principal, mut checked } = caller;
    let mut request = request;
    let cost = CostCheck::default();
    if let Some(principal) = principal {
        request = crate::graphql::loaders::attach(request.data(principal).data(cost.clone()), &endpoint.state.db);
        request = crate::graphql::request_writes::attach(request);
        if let Some(id) = crate::request_id::of(headers) {
            request = request.data(id);
        }
    }
    let span = operation_span(&mut request);
    let response = respond_with_max(media, endpoint.schema.execute(request).instrument(span).await, max_bytes);
    checked.merge(cost.take());
    with_rate_headers(response, &checked)
}

/// Adds the `RateLimit-Policy` and `RateLimit` headers of the buckets a request touched.
fn with_rate_headers(mut response: Response, checked: &crate::rate::Checked) -> Response {
    if let Some((policy, now)) = checked.headers()
        && let (Ok(policy), Ok(now)) = (header::HeaderValue::from_str(&policy), header::HeaderValue::from_str(&now))
    {
        response.headers_mut().insert("ratelimit-policy", policy);
        response.headers_mut().insert("ratelimit", now);
    }
    response
}

/// [`respond_with_max`] for responses that cannot be large (request errors).
fn respond(media: Media, response: async_graphql::Response) -> Response {
    respond_with_max(media, response, usize::MAX)
}

/// Writes a GraphQL response with the status the spec and the error codes call for:
/// SERVICE_UNAVAILABLE is 503 with `Retry-After` whatever the media type; to clients of the
/// GraphQL media type a request error (no field ran) is 400 (401 when authentication
/// failed) and carries no `data`. An executed response is written by async-graphql-axum's
/// `GraphQLResponse` (which also carries the response's cache control and HTTP headers),
/// with the status and content type set here: the stock responder always answers 200
/// with `application/graphql-response+json`, which the spec's content negotiation forbids
/// for clients that asked for `application/json`. A body over `max_bytes` is replaced by
/// a TOO_COMPLEX error, as a WebSocket message over the same limit would be.
fn respond_with_max(media: Media, response: async_graphql::Response, max_bytes: usize) -> Response {
    let codes: Vec<&str> = response
        .errors
        .iter()
        .filter_map(|error| error.extensions.as_ref()?.get("code"))
        .filter_map(|code| match code {
            async_graphql::Value::String(code) => Some(code.as_str()),
            _ => None,
        })
        .collect();
    let unavailable = codes.contains(&"SERVICE_UNAVAILABLE");
    let retry_after =
        response.errors.iter().find_map(|error| match error.extensions.as_ref()?.get("retryAfterSeconds") {
            Some(async_graphql::Value::Number(seconds)) => seconds.as_u64(),
            _ => None,
        });
    let limited = codes.contains(&"RATE_LIMITED");
    let mut http = if is_request_error(&response) {
        // No field ran: the spec wants no `data` entry at all.
        let status = match media {
            Media::GraphqlResponse if codes.contains(&"UNAUTHENTICATED") => StatusCode::UNAUTHORIZED,
            Media::GraphqlResponse => StatusCode::BAD_REQUEST,
            Media::Json => StatusCode::OK,
        };
        media.respond(status, &json!({ "errors": response.errors }))
    } else {
        let mut http = GraphQLResponse::from(response).into_response();
        media.set_content_type(http.headers_mut());
        let too_large = http.body().size_hint().exact().is_none_or(|size| size > max_bytes as u64);
        if too_large {
            let size = http.body().size_hint().lower();
            let message = format!(
                "the result is {size} bytes, more than the {max_bytes} bytes a response may carry; ask for fewer fields or a smaller page"
            );
            http = media.respond(
                StatusCode::OK,
                &json!({ "data": null, "errors": [{ "message": message, "extensions": { "code": "TOO_COMPLEX" } }] }),
            );
        }
        http
    };
    if unavailable {
        *http.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        http.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static(RETRY_AFTER_SECONDS));
    } else if limited {
        *http.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        http.headers_mut().insert(header::RETRY_AFTER, retry_after.unwrap_or(1).into());
    }
    http
}

/// What `Retry-After` tells a client while the database is unreachable.
const RETRY_AFTER_SECONDS: &str = "1";
