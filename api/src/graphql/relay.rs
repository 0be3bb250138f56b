//! Relay connections: opaque cursors over `(time, id)` keys and the page arguments every
//! top-level list shares.
use async_graphql::OutputType;
use async_graphql::connection::{Connection, CursorType, Edge, OpaqueCursor};
use uuid::Uuid;

use crate::error::ApiError;
use worker::app::limits::{DEFAULT_PAGE, page_size};
pub use worker::app::lists::{Listed, Page as PageArgs, PageKey};

/// Validates `first` (0..=100, default 20) and decodes `after`.
pub fn parse(first: Option<i32>, after: Option<String>) -> Result<PageArgs, ApiError> {
    let size = page_size(first, DEFAULT_PAGE)?;
    let after = match after {
        None => None,
        Some(cursor) => Some(decode(&cursor)?),
    };
    Ok(PageArgs { size, after })
}

/// The opaque cursor of a row.
pub fn encode(key: PageKey) -> String {
    OpaqueCursor((key.at, key.id)).encode_cursor()
}

/// Decodes a cursor made by `encode`; anything else is bad input.
fn decode(cursor: &str) -> Result<PageKey, ApiError> {
    let OpaqueCursor((at, id)) = OpaqueCursor::<(i64, Uuid)>::decode_cursor(cursor)
        .map_err(|_| ApiError::bad_input("after is not a cursor from this list"))?;
    Ok(PageKey { at, id })
}

/// A connection of `rows`: keeps `args.size` of them, each with the cursor `key` gives it.
/// More follow when there were more rows than the page holds, or when `maybe_more` says
/// the source was not read to its end.
pub fn build<R, N: OutputType>(
    args: &PageArgs,
    rows: Vec<R>,
    maybe_more: bool,
    key: impl Fn(&R) -> PageKey,
    node: impl Fn(R) -> N,
) -> Connection<String, N> {
    let size = usize::try_from(args.size).unwrap_or(usize::MAX);
    let has_next = rows.len() > size || maybe_more;
    let mut connection = Connection::new(args.after.is_some(), has_next);
    connection.edges.extend(rows.into_iter().take(size).map(|row| Edge::new(encode(key(&row)), node(row))));
    connection
}

/// A connection of what a list operation answered.
pub fn listed<R, N: OutputType>(
    args: &PageArgs,
    listed: Listed<R>,
    key: impl Fn(&R) -> PageKey,
    node: impl Fn(R) -> N,
) -> Connection<String, N> {
    build(args, listed.rows, listed.maybe_more, key, node)
}
