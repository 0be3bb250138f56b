//! Content negotiation for GraphQL over HTTP: a client that accepts
//! `application/graphql-response+json` gets it, with HTTP status codes that follow the
//! spec; everyone else gets `application/json`, with 200 for documents that fail to
//! parse or validate (legacy clients read the errors from the body).
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The spec's media type for GraphQL responses.
pub const GRAPHQL_RESPONSE_JSON: &str = "application/graphql-response+json";

/// Which response media type the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// `application/graphql-response+json`: request errors are 4xx and carry no `data`.
    GraphqlResponse,
    /// `application/json` (also for `*/*` or no Accept): errors travel with status 200.
    Json,
}

impl Media {
    /// Picks the media type from the Accept header.
    pub fn negotiate(headers: &HeaderMap) -> Self {
        let accept = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        if accept.contains(GRAPHQL_RESPONSE_JSON) { Self::GraphqlResponse } else { Self::Json }
    }

    fn content_type(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Self::GraphqlResponse => "application/graphql-response+json; charset=utf-8",
            Self::Json => "application/json; charset=utf-8",
        })
    }

    /// Sets the `Content-Type` of a response to this media type.
    pub fn set_content_type(self, headers: &mut HeaderMap) {
        headers.insert(header::CONTENT_TYPE, self.content_type());
    }

    /// A response body with this media type.
    pub fn respond(self, status: StatusCode, body: &Value) -> Response {
        self.respond_text(status, body.to_string())
    }

    /// A response of JSON text already encoded, with this media type.
    pub fn respond_text(self, status: StatusCode, text: String) -> Response {
        let mut response = (status, text).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, self.content_type());
        response
    }

    /// A malformed request (bad JSON, bad parameters): 400 whatever the media type, with
    /// no `data`, as the spec asks of both.
    pub fn request_error(self, message: &str, code: &str) -> Response {
        let body = json!({ "errors": [{ "message": message, "extensions": { "code": code } }] });
        let status = StatusCode::BAD_REQUEST;
        self.respond(status, &body)
    }
}
