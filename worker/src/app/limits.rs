//! Input limits. Each one answers `BAD_USER_INPUT` with a message naming the argument, so
//! no input can reach the database or the worker in a shape that fails there instead.
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::error::AppError;

/// The most rows one list or connection page returns.
pub const MAX_PAGE: i32 = 100;
/// The page size of a connection when `first` is not given.
pub const DEFAULT_PAGE: i32 = 20;
/// The longest research query, in characters.
pub const MAX_QUERY_CHARS: usize = 4_000;
/// The longest name (space, API key) or subject id, in characters.
pub const MAX_NAME_CHARS: usize = 255;
/// The longest excerpt of a document one request reads, in code points.
pub const MAX_EXCERPT_CHARS: usize = 20_000;
/// The longest document title, in characters.
pub const MAX_TITLE_CHARS: usize = 512;
/// The longest document source URI, in characters.
pub const MAX_SOURCE_URI_CHARS: usize = 2_048;
/// The largest `limits` or `metadata` object, serialized, in bytes.
pub const MAX_JSON_BYTES: usize = 16 * 1024;
/// The deepest nesting of arrays and objects in a `limits` or `metadata` object.
pub const MAX_JSON_DEPTH: usize = 32;
/// The allowed `topK` values.
pub const TOP_K: std::ops::RangeInclusive<i32> = 1..=100;
/// The longest idempotency key, in characters.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

/// A page size: `first` if it is within `0..=MAX_PAGE`, else `default`.
pub fn page_size(first: Option<i32>, default: i32) -> Result<u64, AppError> {
    let size = first.unwrap_or(default);
    if !(0..=MAX_PAGE).contains(&size) {
        return Err(AppError::bad_input(format!("first must be between 0 and {MAX_PAGE}")));
    }
    Ok(u64::try_from(size).unwrap_or_default())
}

/// A sequence to read after: 0 or more.
pub fn after_sequence(after: Option<i32>) -> Result<i32, AppError> {
    match after.unwrap_or(0) {
        after if after >= 0 => Ok(after),
        _ => Err(AppError::bad_input("afterSequence must not be negative")),
    }
}

/// The `afterOffset` of an answer subscription: zero or more code points.
pub fn after_offset(after: Option<i32>) -> Result<i32, AppError> {
    match after.unwrap_or(0) {
        after if after >= 0 => Ok(after),
        _ => Err(AppError::bad_input("afterOffset must not be negative")),
    }
}

/// A required text: not blank, at most `max` characters.
pub fn text(field: &str, value: &str, max: usize) -> Result<(), AppError> {
    if value.trim().is_empty() {
        return Err(AppError::bad_input(format!("{field} must not be empty")));
    }
    if value.chars().count() > max {
        return Err(AppError::bad_input(format!("{field} must be at most {max} characters")));
    }
    Ok(())
}

/// The most sub-queries an approved plan may hold.
pub const MAX_PLAN_QUERIES: usize = 16;

/// An approved plan's sub-queries: 1 to 16, each checked like a query.
pub fn sub_queries(queries: &[String]) -> Result<(), AppError> {
    if queries.is_empty() || queries.len() > MAX_PLAN_QUERIES {
        return Err(AppError::bad_input(format!(
            "subQueries must hold 1 to {MAX_PLAN_QUERIES} sub-queries; it holds {}",
            queries.len()
        )));
    }
    for (index, query) in queries.iter().enumerate() {
        text(&format!("subQueries[{index}]"), query, MAX_QUERY_CHARS)?;
    }
    Ok(())
}

/// Document content: not blank, at most `max_bytes` bytes of UTF-8 (`KFS_MAX_CONTENT_BYTES`).
pub fn content(value: &str, max_bytes: usize) -> Result<(), AppError> {
    if value.trim().is_empty() {
        return Err(AppError::bad_input("content must not be empty"));
    }
    if value.len() > max_bytes {
        return Err(AppError::bad_input(format!("content is {} bytes; at most {max_bytes} are accepted", value.len())));
    }
    Ok(())
}

/// An optional source URI: at most `MAX_SOURCE_URI_CHARS`; blank means none.
pub fn source_uri(value: Option<String>) -> Result<Option<String>, AppError> {
    match value {
        Some(uri) if uri.trim().is_empty() => Ok(None),
        Some(uri) if uri.chars().count() > MAX_SOURCE_URI_CHARS => {
            Err(AppError::bad_input(format!("sourceUri must be at most {MAX_SOURCE_URI_CHARS} characters")))
        }
        other => Ok(other),
    }
}

/// An optional JSON argument that must be an object of at most `MAX_JSON_BYTES`; absent
/// means the empty object.
pub fn json_object(field: &str, value: Option<Value>) -> Result<Value, AppError> {
    let Some(value) = value else {
        return Ok(Value::Object(Default::default()));
    };
    if !value.is_object() {
        return Err(AppError::bad_input(format!("{field} must be a JSON object")));
    }
    if json_depth(&value) > MAX_JSON_DEPTH {
        return Err(AppError::bad_input(format!("{field} must not nest more than {MAX_JSON_DEPTH} levels deep")));
    }
    let size = serde_json::to_vec(&value).map_err(AppError::internal)?.len();
    if size > MAX_JSON_BYTES {
        return Err(AppError::bad_input(format!("{field} must be at most {MAX_JSON_BYTES} bytes serialized")));
    }
    Ok(value)
}

/// How deeply arrays and objects nest in `value` (a scalar is 0), without recursing.
fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(fields) => Box::new(fields.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}

/// A task's `limits`: a JSON object within the size limits, every key known and every
/// value of its type and range (absent means every default).
pub fn task_limits(value: Option<Value>) -> Result<entity::TaskLimits, AppError> {
    let value = json_object("limits", value)?;
    entity::TaskLimits::parse(&value).map_err(|error| AppError::bad_input(error.message))
}

/// `filters` given alone (the MCP `search` tool's), checked exactly as a task's are: the
/// same size, depth and shape rules, so a filter one accepts the other does too.
pub fn filters_alone(filters: Option<Value>) -> Result<Option<entity::DocumentFilters>, AppError> {
    let limits = task_limits(with_filters(None, filters)?).map_err(|error| match error {
        // Given alone, they are called `filters`.
        AppError::BadUserInput(message) => match message.strip_prefix("limits.filters") {
            Some(rest) => AppError::BadUserInput(format!("filters{rest}")),
            None => AppError::BadUserInput(message.replacen("limits ", "filters ", 1)),
        },
        other => other,
    })?;
    Ok(limits.filters)
}

/// A task's `limits` with `filters` (given beside them, as `createResearchTask`'s input
/// and the MCP tools take it) stored under `filters`; both at once is BAD_USER_INPUT.
pub fn with_filters(limits: Option<Value>, filters: Option<Value>) -> Result<Option<Value>, AppError> {
    let Some(filters) = filters.filter(|filters| !filters.is_null()) else { return Ok(limits) };
    let mut limits = match limits {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(limits)) => limits,
        Some(_) => return Err(AppError::bad_input("limits must be a JSON object")),
    };
    if limits.get("filters").is_some_and(|given| !given.is_null()) {
        return Err(AppError::bad_input("filters are given twice: as filters and as limits.filters; give them once"));
    }
    limits.insert("filters".to_owned(), filters);
    Ok(Some(Value::Object(limits)))
}

/// `topK`, if given, within `TOP_K`.
pub fn top_k(value: Option<i32>) -> Result<Option<i32>, AppError> {
    match value {
        Some(k) if !TOP_K.contains(&k) => {
            Err(AppError::bad_input(format!("topK must be between {} and {}", TOP_K.start(), TOP_K.end())))
        }
        other => Ok(other),
    }
}

/// `budgetUsd`, if given, finite and not negative.
pub fn budget(value: Option<f64>) -> Result<Option<f64>, AppError> {
    match value {
        Some(usd) if !usd.is_finite() || usd < 0.0 => {
            Err(AppError::bad_input("budgetUsd must be a finite number of at least 0"))
        }
        other => Ok(other),
    }
}

/// An optional idempotency key: not blank, at most `MAX_IDEMPOTENCY_KEY_CHARS`.
pub fn idempotency_key(value: Option<String>) -> Result<Option<String>, AppError> {
    if let Some(key) = &value {
        text("idempotencyKey", key, MAX_IDEMPOTENCY_KEY_CHARS)?;
    }
    Ok(value)
}

/// An optional instant that must lie in the future; returns it as epoch milliseconds.
pub fn future(field: &str, value: Option<DateTime<Utc>>) -> Result<Option<i64>, AppError> {
    match value {
        Some(at) if at <= Utc::now() => Err(AppError::bad_input(format!("{field} must be in the future"))),
        other => Ok(other.map(|at| at.timestamp_millis())),
    }
}
