//! HS256 JSON Web Tokens signed with a secret this service shares (development, and
//! deployments that mint their own tokens). Several secrets are accepted at once, the
//! current one and `KFS_JWT_PREVIOUS_SECRETS`, so the secret can be rotated without
//! logging everyone out; tokens are signed with the current one only.
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, encode};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::claims;
use crate::error::ApiError;
use worker::app::Principal;

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

/// The claims as decoded, with the audience kept as given: the JWT library reads an `aud`
/// that is neither a string nor a list of strings as absent, so its shape is checked here.
#[derive(Deserialize)]
struct Decoded {
    #[serde(flatten)]
    claims: Claims,
    #[serde(default)]
    aud: Option<serde_json::Value>,
}

/// Checks the signature against each of `secrets`, then expiry (and `nbf` when present)
/// within `leeway` seconds, and the claims; returns the caller. Without `resource` a token
/// naming any audience is refused; with it (the MCP resource's URL, RFC 8707) a token may
/// name no audience or one that includes `resource`.
pub fn verify_token(
    secrets: &[SecretString],
    token: &str,
    leeway: u64,
    resource: Option<&str>,
) -> Result<Principal, ApiError> {
    let mut validation = Validation::new(Algorithm::HS256);
    if let Some(resource) = resource {
        validation.set_audience(&[resource]);
    }
    validation.set_required_spec_claims(&["exp", "sub"]);
    validation.validate_nbf = true;
    validation.leeway = leeway;
    let decoded = secrets
        .iter()
        .find_map(|secret| {
            let key = DecodingKey::from_secret(secret.expose_secret().as_bytes());
            decode::<Decoded>(token, &key, &validation).ok()
        })
        .ok_or(ApiError::Unauthenticated)?
        .claims;
    if !claims::audience_well_formed(decoded.aud.as_ref()) {
        return Err(ApiError::Unauthenticated);
    }
    let claims = decoded.claims;
    claims::principal(&claims.sub, &claims.tenant, claims.channel.as_deref(), claims.exp, leeway)
}

/// Signs a token (the development CLI and tests use it).
pub fn mint_token(secret: &SecretString, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
    let key = EncodingKey::from_secret(secret.expose_secret().as_bytes());
    encode(&Header::new(Algorithm::HS256), claims, &key)
}
