//! Identity: turning a request's credential into a `Principal`. JWTs for interactive,
//! MCP and agent callers, verified against an identity provider's JWKS (`issuers`) or
//! this service's own HS256 secrets (`jwt`); API keys for service clients.

mod claims;
mod identity;
mod issuers;
mod jwks;
mod jwt;

pub use identity::{Identity, IdentitySettings};
pub use issuers::{IssuerSettings, issuers_from_env};
pub use jwks::JwksSettings;
pub use jwt::{Claims, mint_token, verify_token};
use worker::app::Principal;

use crate::error::ApiError;
use sea_orm::DatabaseConnection;

/// Resolves an `Authorization` header value. No header means an anonymous request
/// (`Ok(None)`); a header that names no valid credential is `Unauthenticated`.
pub async fn authenticate(
    db: &DatabaseConnection,
    identity: &Identity,
    header: Option<&str>,
) -> Result<Option<Principal>, ApiError> {
    authenticate_for(db, identity, header, None).await
}

/// [`authenticate`] for a request to `resource` (the MCP resource's URL), which a JWT may
/// name as its audience.
pub async fn authenticate_for(
    db: &DatabaseConnection,
    identity: &Identity,
    header: Option<&str>,
    resource: Option<&str>,
) -> Result<Option<Principal>, ApiError> {
    // An empty header (or a bare `Bearer `, as a blank GraphiQL template sends) is no
    // credential at all: the request is anonymous, not refused.
    let Some(header) =
        header.map(str::trim).filter(|header| !header.is_empty() && !header.eq_ignore_ascii_case("bearer"))
    else {
        return Ok(None);
    };
    let credential = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|credential| !credential.is_empty())
        .ok_or(ApiError::Unauthenticated)?;
    // API keys are `kfs_<id>_<secret>`; a JWT always starts with its base64url header.
    if credential.starts_with("kfs_") {
        worker::app::keys::authenticate(db, credential).await.map(Some)
    } else {
        identity.verify_jwt_for(credential, resource).await.map(Some)
    }
}
