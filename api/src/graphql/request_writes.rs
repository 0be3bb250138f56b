//! What one request may store, whatever it repeats: a GraphQL request may name the same
//! variable in many aliased mutations, so a body's size says nothing of what it writes.
//! Every field that adds or changes a document charges the request's [`RequestWrites`]
//! (attached to every HTTP request and every WebSocket operation): at most
//! [`MAX_DOCUMENTS_PER_REQUEST`] documents written, their text at most the body limit in
//! all (what one body could carry without repeating itself), and each uploaded file stored
//! at most once.
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use async_graphql::{Context, Upload, UploadValue};

use crate::error::ApiError;

/// The most documents one request may add, change or upload.
pub const MAX_DOCUMENTS_PER_REQUEST: u32 = 10;

/// The request's tally of what it stored so far.
#[derive(Clone, Default)]
pub struct RequestWrites(Arc<Mutex<Tally>>);

#[derive(Default)]
struct Tally {
    documents: u32,
    text_bytes: usize,
    uploads: HashSet<usize>,
}

/// Attaches a fresh tally to a request (an HTTP request, a WebSocket operation).
pub fn attach(request: async_graphql::Request) -> async_graphql::Request {
    request.data(RequestWrites::default())
}

/// Charges one more document holding `text_bytes` of text to the request, or refuses it
/// with BAD_USER_INPUT once the request passed a bound. `max_text_bytes` is the body limit.
pub fn charge_document(ctx: &Context<'_>, text_bytes: usize, max_text_bytes: usize) -> Result<(), ApiError> {
    let Some(writes) = ctx.data_opt::<RequestWrites>() else {
        return Err(ApiError::internal(anyhow::anyhow!("a request was executed without its write tally")));
    };
    let mut tally = writes.0.lock().unwrap_or_else(PoisonError::into_inner);
    if tally.documents >= MAX_DOCUMENTS_PER_REQUEST {
        return Err(ApiError::bad_input(format!(
            "one request adds, changes or uploads at most {MAX_DOCUMENTS_PER_REQUEST} documents; send the rest in another request"
        )));
    }
    let text_bytes = tally.text_bytes.saturating_add(text_bytes);
    if text_bytes > max_text_bytes {
        return Err(ApiError::bad_input(format!(
            "one request stores at most {max_text_bytes} bytes of document text in all (the body limit), however often it repeats a variable; send the rest in another request"
        )));
    }
    tally.documents += 1;
    tally.text_bytes = text_bytes;
    Ok(())
}

/// The uploaded file `upload` names, taken for storing: BAD_USER_INPUT when the request
/// carries no such file, or when another field of the request stored it already.
pub fn take_upload(ctx: &Context<'_>, upload: &Upload) -> Result<UploadValue, ApiError> {
    let index = **upload;
    if index >= ctx.query_env.uploads.len() {
        return Err(ApiError::bad_input("file must be a file this multipart request carries"));
    }
    let Some(writes) = ctx.data_opt::<RequestWrites>() else {
        return Err(ApiError::internal(anyhow::anyhow!("a request was executed without its write tally")));
    };
    if !writes.0.lock().unwrap_or_else(PoisonError::into_inner).uploads.insert(index) {
        return Err(ApiError::bad_input(
            "this uploaded file is stored already by another field of this request; a file is stored once",
        ));
    }
    upload.value(ctx).map_err(|_| ApiError::bad_input("file must be an uploaded file"))
}
