//! The checks every GraphQL request passes before async-graphql sees it, whichever
//! transport carried it (HTTP POST or GET, a WebSocket `subscribe`). async-graphql's
//! parser and validator recurse: over nested brackets, and over fragment spreads in every
//! fragment the document defines, used or not. A document built to make them recurse
//! thousands of levels deep overflows a worker's stack and aborts the process, and one
//! built to make them fan out keeps a worker busy for seconds. So the document is bounded
//! in three passes that do not recurse, each cheap and each before the step it protects:
//!
//! 1. its size in bytes, then one lexical scan for tokens, bracket nesting and fragment
//!    definitions (`lexer`), before parsing;
//! 2. parsing, on the blocking pool when the document is large, so a slow parse never
//!    holds a runtime worker that other requests need;
//! 3. the parsed document's depth and expanded size with spreads followed (`shape`), and
//!    strings no backend can store (`strings`), before validation.
//!
//! A document that passed steps 2 and 3 is kept by its text (`cache`), so the next request
//! sending the same text skips them; step 1 and the variables' checks run every time.

mod cache;
mod lexer;
mod shape;
mod strings;

use async_graphql::parser::parse_query;
use async_graphql::{ErrorExtensionValues, Request, ServerError};

use super::MAX_RECURSIVE_DEPTH;

/// The largest document (the query text itself, not its variables) accepted, in bytes.
/// Large values such as a document's content belong in variables.
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// The most tokens a document may have. GraphiQL's introspection query has about 300.
pub const MAX_TOKENS: usize = 15_000;
/// The deepest nesting of brackets (`{`, `(`, `[`) in a document.
pub const MAX_NESTING: usize = 64;
/// The most fragment definitions a document may have.
pub const MAX_FRAGMENTS: usize = 256;
/// The most selections all of a document's operations and fragments may expand to once
/// fragment spreads are followed (GraphiQL's introspection query expands to about 400).
pub const MAX_EXPANDED_SELECTIONS: usize = 20_000;
/// Documents at least this large are parsed on the blocking pool.
const PARSE_ON_POOL_BYTES: usize = 16 * 1024;

/// Checks the request's document and variables and parses the document, so execution
/// starts from a document known to be bounded. The error is a request error (no field
/// ran) carrying its `extensions.code`.
pub async fn prepare(mut request: Request) -> Result<Request, ServerError> {
    let query = &request.query;
    if query.len() > MAX_DOCUMENT_BYTES {
        return Err(bad_input(format!(
            "the GraphQL document is {} bytes; at most {MAX_DOCUMENT_BYTES} are accepted (pass large values as variables)",
            query.len()
        )));
    }
    let scanned = lexer::scan(query, MAX_TOKENS, MAX_NESTING);
    if scanned.tokens > MAX_TOKENS {
        return Err(too_complex(format!("the GraphQL document has more than {MAX_TOKENS} tokens")));
    }
    if scanned.max_nesting > MAX_NESTING {
        return Err(too_complex(format!("the GraphQL document nests brackets more than {MAX_NESTING} levels deep")));
    }
    if scanned.fragments > MAX_FRAGMENTS {
        return Err(too_complex(format!("the GraphQL document defines more than {MAX_FRAGMENTS} fragments")));
    }
    if scanned.has_nul || request.operation_name.as_deref().is_some_and(|name| name.contains('\0')) {
        return Err(nul());
    }
    if !strings::variables_are_storable(&request.variables) {
        return Err(nul());
    }
    if !strings::variables_name_carried_uploads(&request.variables, request.uploads.len()) {
        return Err(unknown_upload());
    }
    if let Some(document) = cache::get(query) {
        request.set_parsed_query(document);
        return Ok(request);
    }

    let document = if query.len() >= PARSE_ON_POOL_BYTES {
        let text = query.clone();
        tokio::task::spawn_blocking(move || parse_query(text))
            .await
            .map_err(|_| internal("parsing the document stopped unexpectedly"))?
    } else {
        parse_query(query)
    };
    let document = document.map_err(|error| with_code(ServerError::from(error), "BAD_USER_INPUT"))?;

    shape::check(&document, MAX_RECURSIVE_DEPTH, MAX_EXPANDED_SELECTIONS).map_err(|error| match error {
        shape::ShapeError::Cycle(name) => {
            bad_input(format!("fragment \"{name}\" spreads itself, directly or through other fragments"))
        }
        shape::ShapeError::TooDeep { depth, max } => too_complex(format!(
            "selections nest {depth} levels deep once fragment spreads are followed; at most {max} are allowed"
        )),
        shape::ShapeError::TooLarge { max } => too_complex(format!(
            "the document's operations and fragments expand to more than {max} selections once fragment spreads are followed"
        )),
    })?;
    if !strings::document_names_no_upload(&document) {
        return Err(unknown_upload());
    }
    if !strings::document_is_storable(&document) {
        return Err(nul());
    }
    cache::put(&request.query, &document);
    request.set_parsed_query(document);
    Ok(request)
}

fn unknown_upload() -> ServerError {
    bad_input("a value names an uploaded file the request does not carry; send files as a multipart request".to_owned())
}

fn nul() -> ServerError {
    bad_input("strings must not contain NUL (U+0000) characters".to_owned())
}

fn bad_input(message: String) -> ServerError {
    with_code(ServerError::new(message, None), "BAD_USER_INPUT")
}

fn too_complex(message: String) -> ServerError {
    with_code(ServerError::new(message, None), "TOO_COMPLEX")
}

fn internal(message: &str) -> ServerError {
    with_code(ServerError::new(message, None), "INTERNAL_SERVER_ERROR")
}

fn with_code(mut error: ServerError, code: &str) -> ServerError {
    error.extensions.get_or_insert_with(ErrorExtensionValues::default).set("code", code);
    error
}

#[cfg(test)]
mod tests {
    use async_graphql::Variables;

    use super::*;

    /// The cache is the process's: tests that look into it run one at a time, so one
    /// filling it cannot evict what another just checked was kept.
    static CACHE_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        CACHE_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn prepared(query: &str, variables: serde_json::Value) -> Result<Request, ServerError> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        runtime.block_on(prepare(Request::new(query).variables(Variables::from_json(variables))))
    }

    fn code(error: &ServerError) -> Option<String> {
        let value = error.extensions.as_ref()?.get("code")?;
        Some(value.to_string().trim_matches('"').to_owned())
    }

    #[test]
    fn a_kept_document_still_has_every_requests_variables_checked() {
        let _serial = one_at_a_time();
        let query = "query($q: String) { guardCacheVariables(q: $q) }";
        assert!(prepared(query, serde_json::json!({ "q": "fine" })).is_ok());
        assert!(cache::get(query).is_some(), "a checked document is kept");
        let refused = prepared(query, serde_json::json!({ "q": "x\u{0}y" })).expect_err("a NUL variable");
        assert_eq!(code(&refused).as_deref(), Some("BAD_USER_INPUT"));
        let mut again = prepared(query, serde_json::json!({ "q": "fine" })).expect("the kept document");
        assert_eq!(again.parsed_query().expect("parsed").operations.iter().count(), 1);
    }

    #[test]
    fn a_refused_document_is_never_kept_and_is_refused_every_time() {
        let _serial = one_at_a_time();
        let deep = format!("{{ guardCacheDeep {}{} }}", "{ a ".repeat(40), "}".repeat(40));
        for _ in 0..2 {
            let refused = prepared(&deep, serde_json::json!({})).expect_err("too deep");
            assert_eq!(code(&refused).as_deref(), Some("TOO_COMPLEX"));
        }
        assert!(cache::get(&deep).is_none());
        let nul = "{ guardCacheNul(q: \"\\u0000\") }";
        for _ in 0..2 {
            assert_eq!(
                code(&prepared(nul, serde_json::json!({})).expect_err("a NUL")).as_deref(),
                Some("BAD_USER_INPUT")
            );
        }
        assert!(cache::get(nul).is_none());
    }

    #[test]
    fn a_large_document_is_parsed_every_time_rather_than_kept() {
        let _serial = one_at_a_time();
        let large = format!("{{ guardCacheLarge {} }}", "a ".repeat(cache::MAX_CACHED_BYTES));
        assert!(prepared(&large, serde_json::json!({})).is_ok());
        assert!(cache::get(&large).is_none());
    }

    #[test]
    fn many_different_documents_stay_within_the_caches_byte_bound() {
        let _serial = one_at_a_time();
        // Documents just under the per-document bound, several times more than fit.
        let filler = "b ".repeat(cache::MAX_CACHED_BYTES / 2 - 40);
        let texts: Vec<String> = (0..3 * cache::MAX_TOTAL_BYTES / cache::MAX_CACHED_BYTES)
            .map(|index| format!("{{ guardCacheFill{index} {filler} }}"))
            .collect();
        for text in &texts {
            assert!(prepared(text, serde_json::json!({})).is_ok());
            assert!(cache::text_bytes() <= cache::MAX_TOTAL_BYTES);
        }
        assert!(cache::get(texts.last().expect("texts")).is_some(), "the newest is kept");
        assert!(cache::get(&texts[0]).is_none(), "the oldest made room");
    }
}
