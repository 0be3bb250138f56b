//! Identity: turning a request's credential into a `Principal`. JWTs for interactive,
//! MCP and agent callers, verified against an identity provider's JWKS (`issuers`) or
//! this service's own HS256 secrets (`jwt`); API keys for service clients.

mod api_key;
mod claims;
mod issuers;
mod jwks;
mod jwt;
mod principal;

use std::time::Duration;

pub use api_key::authenticate_api_key;
pub use issuers::{IssuerSettings, issuers_from_env};
pub use jwks::JwksSettings;
pub use jwt::{Claims, mint_token, verify_token};
pub use principal::{ApiKeyCredential, Principal};
use secrecy::SecretString;
use serde::Deserialize;

use crate::config::Settings;
use crate::error::ApiError;
use crate::state::AppState;

/// Everything that verifies caller tokens, built once at start.
pub struct Identity {
    /// HS256 secrets accepted (current first); empty when only identity providers sign.
    secrets: Vec<SecretString>,
    issuers: issuers::Issuers,
    leeway: u64,
}

impl Identity {
    /// From the settings. On PostgreSQL the public development secret is never accepted:
    /// there either a real `KFS_JWT_SECRET` or an identity provider must be configured.
    pub fn new(settings: &Settings) -> anyhow::Result<Self> {
        let jwks = JwksSettings {
            timeout: Duration::from_millis(settings.jwks_timeout_ms.max(1)),
            refresh_interval: Duration::from_secs(settings.jwks_refresh_seconds),
            max_age: Duration::from_secs(settings.jwks_max_age_seconds.max(1)),
        };
        let issuers = issuers::Issuers::new(settings.issuers(), jwks)?;
        let development_only = !settings.is_sqlite() && settings.uses_development_secret();
        anyhow::ensure!(
            !development_only || !issuers.is_empty(),
            "KFS_JWT_SECRET (or an identity provider in KFS_JWT_ISSUERS) must be set when running on PostgreSQL"
        );
        let secrets = if development_only {
            Vec::new()
        } else {
            std::iter::once(settings.jwt_secret.clone()).chain(settings.jwt_previous_secrets.iter().cloned()).collect()
        };
        Ok(Self { secrets, issuers, leeway: settings.jwt_leeway_seconds })
    }

    /// Verifies a bearer JWT. A token whose (unverified) `iss` names a configured issuer is
    /// verified by that issuer alone, with its keys and algorithms; any other token must
    /// be HS256 and signed with one of the secrets. So a token cannot choose how it is
    /// checked: an HS256 token claiming a provider's `iss` (its public key used as the
    /// secret) is refused, as is `alg: none`.
    pub async fn verify_jwt(&self, token: &str) -> Result<Principal, ApiError> {
        #[derive(Deserialize)]
        struct Unverified {
            iss: Option<String>,
        }
        // Without identity providers every token takes the HS256 path: no need to read
        // its claims twice.
        if !self.issuers.is_empty() {
            let claimed = jsonwebtoken::dangerous::insecure_decode::<Unverified>(token)
                .map_err(|_| ApiError::Unauthenticated)?
                .claims
                .iss;
            if let Some(issuer) = claimed.as_deref().and_then(|iss| self.issuers.get(iss)) {
                return issuer.verify(token, self.leeway).await;
            }
        }
        if self.secrets.is_empty() {
            return Err(ApiError::Unauthenticated);
        }
        verify_token(&self.secrets, token, self.leeway)
    }
}

/// Resolves an `Authorization` header value. No header means an anonymous request
/// (`Ok(None)`); a header that names no valid credential is `Unauthenticated`.
pub async fn authenticate(state: &AppState, header: Option<&str>) -> Result<Option<Principal>, ApiError> {
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
        authenticate_api_key(&state.db, credential).await.map(Some)
    } else {
        state.identity.verify_jwt(credential).await.map(Some)
    }
}
