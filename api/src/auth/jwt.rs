//! HS256 JSON Web Tokens for interactive, MCP and agent callers.
use entity::AccessChannel;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, encode};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::Principal;
use crate::error::ApiError;

/// The claims a caller token carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// The subject id.
    pub sub: String,
    /// The tenant id.
    pub tenant: String,
    /// `interactive` (default), `mcp` or `agent`; `service_api` belongs to API keys only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Expiry, seconds since the epoch. Required.
    pub exp: i64,
}

/// The longest subject or tenant id a token may carry (the columns are VARCHAR(255)).
const MAX_ID_LEN: usize = 255;

/// Checks the signature, expiry and claims, and returns the caller.
pub fn verify_token(secret: &SecretString, token: &str) -> Result<Principal, ApiError> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.set_required_spec_claims(&["exp", "sub"]);
    // Expired means expired: a grant checked a minute late is a grant given away.
    validation.leeway = 0;
    let key = DecodingKey::from_secret(secret.expose_secret().as_bytes());
    let claims = decode::<Claims>(token, &key, &validation).map_err(|_| ApiError::Unauthenticated)?.claims;
    let channel = match claims.channel.as_deref() {
        None => AccessChannel::Interactive,
        Some(name) => match AccessChannel::parse(name) {
            Some(AccessChannel::ServiceApi) | None => return Err(ApiError::Unauthenticated),
            Some(channel) => channel,
        },
    };
    // A NUL cannot be stored (PostgreSQL refuses it), so a claim holding one names nobody.
    let well_formed = |id: &str| !id.is_empty() && id.chars().count() <= MAX_ID_LEN && !id.contains('\0');
    if !well_formed(&claims.sub) || !well_formed(&claims.tenant) || claims.sub.starts_with("api_key:") {
        return Err(ApiError::Unauthenticated);
    }
    Ok(Principal {
        tenant_id: claims.tenant,
        subject_id: claims.sub,
        channel,
        api_key: None,
        expires_at: Some(claims.exp.saturating_mul(1000)),
    })
}

/// Signs a token (the development CLI and tests use it).
pub fn mint_token(secret: &SecretString, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
    let key = EncodingKey::from_secret(secret.expose_secret().as_bytes());
    encode(&Header::new(Algorithm::HS256), claims, &key)
}
