//! GraphQL multipart requests (the GraphQL multipart request specification, as Apollo's
//! and urql's upload clients send them): an `operations` part (the request's JSON, held to
//! the same limits as a JSON body), a `map` part saying which variable each file fills,
//! then the files, each streamed to a temporary file as it arrives, never held whole in
//! memory. A file past `KFS_MAX_UPLOAD_BYTES` is refused as soon as the limit is passed:
//! the refusal is answered at once, and what the client still sends is read and dropped
//! afterwards, bounded ([`answer_then_drain`]), so it reads the 413 instead of a reset.
//! A file is opened once however many variables the `map` gives it (they all name it).
//! Only an authenticated caller's body is read at all, at most [`UploadSlots`] at once
//! (the rest wait their turn unread) and within `KFS_UPLOAD_TIMEOUT_MS`, waiting included,
//! so stalled bodies hold a bounded number of descriptors.
//! CSRF: a browser sends a multipart form to any site without asking (it is a "simple"
//! request), so a multipart request must also carry a header that makes the browser ask
//! first (a CORS preflight): `GraphQL-Preflight` (or Apollo's `Apollo-Require-Preflight`).
use std::collections::HashMap;
use std::io::{Seek as _, Write as _};
use std::sync::Arc;

use async_graphql::{Request, UploadValue};
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt as _;
use serde_json::json;

use super::media::Media;

/// Headers any of which makes a browser send a CORS preflight before the request.
const PREFLIGHT_HEADERS: &[&str] = &["graphql-preflight", "apollo-require-preflight"];

/// The files one request may carry (every upload mutation takes one).
const MAX_FILES: usize = 1;

/// The largest `map` part.
const MAX_MAP_BYTES: usize = 64 * 1024;

/// How much of a file is gathered before it is written to its temporary file.
const WRITE_BYTES: usize = 1 << 20;

/// Whether the request is a multipart one.
pub(super) fn is_multipart(headers: &HeaderMap) -> bool {
    content_type(headers).is_some_and(|value| value.to_ascii_lowercase().starts_with("multipart/form-data"))
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok())
}

/// The limits a multipart request is read with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// `KFS_MAX_UPLOAD_BYTES`: the largest file.
    pub max_file_bytes: usize,
    /// The largest `operations` part: the JSON body limit.
    pub max_operations_bytes: usize,
}

/// Reads a multipart request into a GraphQL request with its files, or the response that
/// refuses it (answered at once; the rest of the body is drained behind it), within
/// `timeout`.
pub(super) async fn receive(
    headers: &HeaderMap,
    media: Media,
    body: Body,
    limits: Limits,
    timeout: std::time::Duration,
    parse: impl AsyncFnOnce(axum::body::Bytes) -> Result<Request, String>,
) -> Result<Request, Response> {
    // multer reads the body through a handle kept here, so that after a refusal the rest
    // of what the client sends can still be read.
    let shared = Arc::new(tokio::sync::Mutex::new(body.into_data_stream()));
    let read = match tokio::time::timeout(timeout, read(headers, media, &shared, limits, parse)).await {
        Ok(read) => read,
        Err(_) => {
            let message = format!(
                "the multipart request was not received within {} s (KFS_UPLOAD_TIMEOUT_MS)",
                timeout.as_secs()
            );
            let body = json!({ "errors": [{ "message": message, "extensions": { "code": "BAD_USER_INPUT" } }] });
            // A client this slow gets no further time to drain.
            return Err(closing(media.respond(StatusCode::REQUEST_TIMEOUT, &body)));
        }
    };
    read.map_err(|response| {
        let body = shared.clone();
        tokio::spawn(async move { drain(&body).await });
        closing(response)
    })
}

/// Answers `response` now and reads what the client still sends of `body` behind it,
/// bounded, so that the client reads the answer instead of a reset.
pub(super) fn answer_then_drain(response: Response, body: Body) -> Response {
    let body = tokio::sync::Mutex::new(body.into_data_stream());
    tokio::spawn(async move { drain(&body).await });
    closing(response)
}

/// The response with `Connection: close`: the body behind it is not read to its end, so
/// the connection cannot carry another request.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    response
}

/// Reads what the client still sends after a refusal, for at most [`DRAIN_BYTES`] and
/// [`DRAIN_TIME`], while the refusal is already on its way: closing the connection while
/// the client is still writing would reset it, and most clients then report the reset
/// instead of the answer (a file one byte over the limit would read as a network error).
async fn drain(body: &tokio::sync::Mutex<axum::body::BodyDataStream>) {
    let mut body = body.lock().await;
    let mut drained = 0usize;
    let read = async {
        while let Some(Ok(chunk)) = body.next().await {
            drained += chunk.len();
            if drained > DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

/// How much of a refused body is read and dropped at most.
const DRAIN_BYTES: usize = 64 << 20;

/// How long a refused body is read at most.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// The request's parts, read in order.
async fn read(
    headers: &HeaderMap,
    media: Media,
    shared: &Arc<tokio::sync::Mutex<axum::body::BodyDataStream>>,
    limits: Limits,
    parse: impl AsyncFnOnce(axum::body::Bytes) -> Result<Request, String>,
) -> Result<Request, Response> {
    let bad = |message: String| media.request_error(&message, "BAD_USER_INPUT");
    if !PREFLIGHT_HEADERS.iter().any(|name| headers.contains_key(*name)) {
        return Err(bad(
            "a multipart request must carry the header `GraphQL-Preflight: 1`: it makes browsers ask this server first (a CORS preflight), so a page of another site cannot upload in your name".to_owned(),
        ));
    }
    let boundary = content_type(headers)
        .and_then(|value| multer::parse_boundary(value).ok())
        .ok_or_else(|| bad("the multipart request's Content-Type has no boundary".to_owned()))?;
    let whole =
        limits.max_file_bytes.saturating_mul(MAX_FILES).saturating_add(limits.max_operations_bytes) + MAX_MAP_BYTES;
    let constraints = multer::Constraints::new().size_limit(
        multer::SizeLimit::new()
            .whole_stream(whole as u64)
            .for_field("operations", limits.max_operations_bytes as u64)
            .for_field("map", MAX_MAP_BYTES as u64)
            .per_field(limits.max_file_bytes as u64),
    );
    let stream = futures_util::stream::unfold(shared.clone(), |body| async move {
        let next = body.lock().await.next().await;
        next.map(|item| (item, body))
    });
    let mut multipart = multer::Multipart::with_constraints(stream, boundary, constraints);
    let too_large = |limits: Limits| {
        let message = format!(
            "the file is larger than {} bytes, the most one upload may be (KFS_MAX_UPLOAD_BYTES)",
            limits.max_file_bytes
        );
        let body = json!({ "errors": [{ "message": message, "extensions": { "code": "BAD_USER_INPUT" } }] });
        media.respond(StatusCode::PAYLOAD_TOO_LARGE, &body)
    };
    let refuse = |error: multer::Error| match error {
        multer::Error::FieldSizeExceeded { .. } | multer::Error::StreamSizeExceeded { .. } => too_large(limits),
        _ => bad("the multipart request is malformed".to_owned()),
    };
    let mut request = None;
    let mut map: Option<HashMap<String, Vec<String>>> = None;
    let mut parse = Some(parse);
    let mut files = 0;
    while let Some(mut field) = multipart.next_field().await.map_err(refuse)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "operations" => {
                let bytes = read_part(&mut field, limits.max_operations_bytes).await.map_err(refuse)?;
                let Some(bytes) = bytes else {
                    let message = format!("the operations part is larger than {} bytes", limits.max_operations_bytes);
                    return Err(media.respond(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        &json!({ "errors": [{ "message": message, "extensions": { "code": "BAD_USER_INPUT" } }] }),
                    ));
                };
                let Some(parse) = parse.take() else { return Err(bad("operations appears twice".to_owned())) };
                request = Some(parse(bytes).await.map_err(bad)?);
            }
            "map" => {
                let bytes = read_part(&mut field, MAX_MAP_BYTES)
                    .await
                    .map_err(refuse)?
                    .ok_or_else(|| bad(format!("the map part is larger than {MAX_MAP_BYTES} bytes")))?;
                map = Some(serde_json::from_slice(&bytes).map_err(|_| {
                    bad("map must be a JSON object of file names to lists of variable paths".to_owned())
                })?);
            }
            _ => {
                let (Some(request), Some(map)) = (request.as_mut(), map.as_mut()) else {
                    return Err(bad("the operations and map parts must come before the files".to_owned()));
                };
                let Some(paths) = map.remove(&name) else {
                    return Err(bad(format!("the map does not name the file part {name:?}")));
                };
                files += 1;
                if files > MAX_FILES {
                    return Err(bad(format!("a request carries at most {MAX_FILES} file")));
                }
                let filename = field.file_name().unwrap_or(&name).to_owned();
                let content_type = field.content_type().map(ToString::to_string);
                let content = spool(&mut field).await.map_err(|error| match error {
                    Spool::Multipart(error) => refuse(error),
                    Spool::Disk(error) => {
                        tracing::error!(error = %error, "writing an upload to a temporary file failed");
                        media.respond(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &json!({ "errors": [{ "message": "the upload could not be stored", "extensions": { "code": "INTERNAL_SERVER_ERROR" } }] }),
                        )
                    }
                })?;
                let upload = UploadValue { filename, content_type, content };
                // Every path the map gives the file names the one upload: one descriptor
                // however many paths (a map may name one file thousands of times).
                let marker = async_graphql::Value::String(format!("{UPLOAD_MARKER}{}", request.uploads.len()));
                let mut named = false;
                for path in &paths {
                    if let Some(variable) = variable_at(&mut request.variables, path) {
                        *variable = marker.clone();
                        named = true;
                    }
                }
                if named {
                    request.uploads.push(upload);
                }
            }
        }
    }
    let request = request.ok_or_else(|| bad("the multipart request has no operations part".to_owned()))?;
    match map {
        None => Err(bad("the multipart request has no map part".to_owned())),
        Some(map) if !map.is_empty() => Err(bad("the map names a file the request does not carry".to_owned())),
        Some(_) => Ok(request),
    }
}

/// The prefix async-graphql's `Upload` scalar reads a file's index after.
const UPLOAD_MARKER: &str = "#__graphql_file__:";

/// The variable value at a map path (`variables.input.files.0`), as async-graphql's
/// `Request::set_upload` finds it; `None` when the path names nothing.
fn variable_at<'a>(variables: &'a mut async_graphql::Variables, path: &str) -> Option<&'a mut async_graphql::Value> {
    let mut parts = path.strip_prefix("variables.")?.split('.');
    let first = variables.get_mut(parts.next()?)?;
    parts.try_fold(first, |current, part| match current {
        async_graphql::Value::List(items) => part.parse::<usize>().ok().and_then(move |index| items.get_mut(index)),
        async_graphql::Value::Object(fields) => fields.get_mut(part),
        _ => None,
    })
}

/// How many multipart bodies this process reads at once, in all and per caller: each
/// holds a temporary file until it is received or times out, so a caller that stalls its
/// uploads holds a bounded share of the process's descriptors. A request beyond either
/// bound waits for a place (within the same time limit), holding only its connection: its
/// body is not read meanwhile.
pub struct UploadSlots {
    all: Arc<tokio::sync::Semaphore>,
    per_caller: usize,
    callers: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

/// A multipart body being read; gives its places back when dropped.
pub struct UploadSlot<'a> {
    slots: &'a UploadSlots,
    caller: String,
    places: Option<(tokio::sync::OwnedSemaphorePermit, tokio::sync::OwnedSemaphorePermit)>,
}

impl UploadSlots {
    /// At most `all` bodies at once, `per_caller` of them from one caller.
    pub fn new(all: usize, per_caller: usize) -> Self {
        Self {
            all: Arc::new(tokio::sync::Semaphore::new(all.max(1))),
            per_caller: per_caller.max(1),
            callers: std::sync::Mutex::default(),
        }
    }

    /// A place for `caller`'s body, once the caller and the process have one free.
    pub async fn take(&self, caller: &str) -> UploadSlot<'_> {
        let own = {
            let mut callers = self.callers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let own = callers.entry(caller.to_owned());
            own.or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.per_caller))).clone()
        };
        // Neither semaphore is ever closed.
        let mine = own.acquire_owned().await.expect("a caller's upload semaphore is never closed");
        let place = self.all.clone().acquire_owned().await.expect("the upload semaphore is never closed");
        UploadSlot { slots: self, caller: caller.to_owned(), places: Some((mine, place)) }
    }
}

impl Drop for UploadSlot<'_> {
    fn drop(&mut self) {
        drop(self.places.take());
        let mut callers = self.slots.callers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The map's own reference is the last one: nobody holds or waits for a place.
        if callers.get(&self.caller).is_some_and(|own| Arc::strong_count(own) == 1) {
            callers.remove(&self.caller);
        }
    }
}

/// A part's bytes, or `None` past `limit`.
async fn read_part(field: &mut multer::Field<'_>, limit: usize) -> Result<Option<axum::body::Bytes>, multer::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await? {
        if bytes.len() + chunk.len() > limit {
            return Ok(None);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Some(bytes.into()))
}

/// Why a file could not be spooled.
enum Spool {
    Multipart(multer::Error),
    Disk(std::io::Error),
}

/// Writes a file part to a temporary file (deleted when the last handle closes), a
/// mebibyte at a time on the blocking pool; returns it rewound.
async fn spool(field: &mut multer::Field<'_>) -> Result<std::fs::File, Spool> {
    let mut file = tokio::task::spawn_blocking(tempfile::tempfile)
        .await
        .map_err(|error| Spool::Disk(std::io::Error::other(error)))?
        .map_err(Spool::Disk)?;
    let mut pending = Vec::with_capacity(WRITE_BYTES);
    loop {
        let chunk = field.chunk().await.map_err(Spool::Multipart)?;
        let last = chunk.is_none();
        if let Some(chunk) = chunk {
            pending.extend_from_slice(&chunk);
        }
        if pending.len() >= WRITE_BYTES || (last && !pending.is_empty()) {
            let buffer = std::mem::take(&mut pending);
            let written = tokio::task::spawn_blocking(move || file.write_all(&buffer).map(|()| (file, buffer)));
            let (returned, mut buffer) =
                written.await.map_err(|error| Spool::Disk(std::io::Error::other(error)))?.map_err(Spool::Disk)?;
            file = returned;
            buffer.clear();
            pending = buffer;
        }
        if last {
            break;
        }
    }
    file.rewind().map_err(Spool::Disk)?;
    Ok(file)
}
