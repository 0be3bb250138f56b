//! Every request's id, in `x-request-id` both ways: a caller's own id is kept when it is
//! a sane token (at most 128 characters of letters, digits and `-_.:`), since it ties our
//! records to theirs; anything else is replaced by a fresh UUID. Handlers read it from the
//! request's header ([`of`]); the audit log records it.
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// The header.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest caller-supplied id kept.
const MAX_LEN: usize = 128;

/// A request's id, as handlers pass it on (GraphQL request data, the audit log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// Sets the request's id (keeping a sane one the caller sent) and echoes it in the response.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let kept = request.headers().get(&HEADER).filter(|value| sane(value.as_bytes())).cloned();
    let id = match kept {
        Some(id) => id,
        None => HeaderValue::from_str(&uuid::Uuid::now_v7().to_string()).unwrap_or(HeaderValue::from_static("-")),
    };
    request.headers_mut().insert(HEADER, id.clone());
    let mut response = next.run(request).await;
    response.headers_mut().insert(HEADER, id);
    response
}

/// The id [`assign`] gave the request these headers belong to.
pub fn of(headers: &HeaderMap) -> Option<RequestId> {
    headers.get(&HEADER).and_then(|value| value.to_str().ok()).map(|id| RequestId(id.to_owned()))
}

fn sane(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_LEN
        && id.iter().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::sane;

    #[test]
    fn only_short_plain_tokens_are_kept() {
        assert!(sane(b"req-123_abc.9:1"));
        assert!(sane(uuid::Uuid::nil().to_string().as_bytes()));
        for refused in [&b""[..], b"has space", b"semi;colon", b"new\nline", &[b'a'; 129][..]] {
            assert!(!sane(refused), "{refused:?}");
        }
    }
}
