//! The size bound of what MCP answers: the same `KFS_MAX_RESPONSE_BYTES` GraphQL's
//! results are held to, for tool results and `/mcp/items` alike.
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;

/// `value` if the result carrying it fits in `KFS_MAX_RESPONSE_BYTES`, as GraphQL's
/// results must: a tool result carries it twice (as `structuredContent` and as the same
/// JSON in a text block, escaped once more), so twice its size is what counts. Past it,
/// TOO_COMPLEX, as GraphQL answers.
pub(super) fn within(state: &AppState, value: Value) -> Result<Value, ApiError> {
    let max = state.settings.max_response_bytes;
    let size = serde_json::to_vec(&value).map_err(ApiError::internal)?.len();
    if size.saturating_mul(2) > max {
        return Err(ApiError::TooComplex(format!(
            "the result would be larger than {max} bytes (KFS_MAX_RESPONSE_BYTES); ask for less"
        )));
    }
    Ok(value)
}
