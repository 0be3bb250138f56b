//! The URLs of the MCP surface, all built from the public base URL (`KFS_PUBLIC_URL`).

/// The MCP resource's path.
pub const PATH: &str = "/mcp";

/// Where `fetch`'s items are served over plain HTTP (their `url` when the document has no
/// web address of its own).
pub const ITEMS: &str = "/mcp/items";

/// Where the protected resource metadata is served.
pub const METADATA: &str = "/.well-known/oauth-protected-resource/mcp";

/// The MCP resource's URL: `<public base>/mcp`.
pub fn resource(public_url: &str) -> String {
    format!("{}{PATH}", public_url.trim_end_matches('/'))
}

/// The metadata document's absolute URL.
pub fn metadata(public_url: &str) -> String {
    format!("{}{METADATA}", public_url.trim_end_matches('/'))
}
