//! Verifying caller tokens: the HS256 secrets and the identity providers, built once at
//! start from the settings.
use secrecy::SecretString;
use serde::Deserialize;

use super::issuers;
use super::jwks::JwksSettings;
use super::jwt::verify_token;
use crate::error::ApiError;
use worker::app::Principal;

/// Everything that verifies caller tokens, built once at start.
pub struct Identity {
    /// HS256 secrets accepted (current first); empty when only identity providers sign.
    secrets: Vec<SecretString>,
    issuers: issuers::Issuers,
    leeway: u64,
}

/// What verifying tokens is configured with (the api's settings gather it).
pub struct IdentitySettings {
    /// The current HS256 secret (`KFS_JWT_SECRET`).
    pub jwt_secret: SecretString,
    /// Secrets still accepted after a rotation (`KFS_JWT_PREVIOUS_SECRETS`).
    pub jwt_previous_secrets: Vec<SecretString>,
    /// Whether the secret is the public development one on a server that must not take
    /// it (outside development mode).
    pub development_secret_refused: bool,
    /// Clock skew allowed, in seconds.
    pub leeway_seconds: u64,
    /// The identity providers.
    pub issuers: Vec<super::IssuerSettings>,
    /// How their keys are fetched and kept.
    pub jwks: JwksSettings,
}

impl Identity {
    /// From the settings. Outside development mode (always, on a database server) the
    /// public development secret is never accepted: a real `KFS_JWT_SECRET` or an identity
    /// provider must be configured.
    pub fn new(settings: IdentitySettings) -> anyhow::Result<Self> {
        let issuers = issuers::Issuers::new(&settings.issuers, settings.jwks)?;
        let development_only = settings.development_secret_refused;
        anyhow::ensure!(
            !development_only || !issuers.is_empty(),
            "KFS_JWT_SECRET (or an identity provider in KFS_JWT_ISSUERS) must be set when running on PostgreSQL (or with KFS_DEVELOPMENT=false)"
        );
        let secrets = if development_only {
            Vec::new()
        } else {
            std::iter::once(settings.jwt_secret).chain(settings.jwt_previous_secrets).collect()
        };
        Ok(Self { secrets, issuers, leeway: settings.leeway_seconds })
    }

    /// Verifies a bearer JWT. A token whose (unverified) `iss` names a configured issuer is
    /// verified by that issuer alone, with its keys and algorithms; any other token must
    /// be HS256 and signed with one of the secrets. So a token cannot choose how it is
    /// checked: an HS256 token claiming a provider's `iss` (its public key used as the
    /// secret) is refused, as is `alg: none`.
    pub async fn verify_jwt(&self, token: &str) -> Result<Principal, ApiError> {
        self.verify_jwt_for(token, None).await
    }

    /// [`verify_jwt`](Self::verify_jwt) for a request to `resource` (the MCP resource's
    /// URL): a token may also name it as its audience (RFC 8707).
    pub async fn verify_jwt_for(&self, token: &str, resource: Option<&str>) -> Result<Principal, ApiError> {
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
                return issuer.verify(token, self.leeway, resource).await;
            }
        }
        if self.secrets.is_empty() {
            return Err(ApiError::Unauthenticated);
        }
        verify_token(&self.secrets, token, self.leeway, resource)
    }
}
