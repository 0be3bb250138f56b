//! What every token's claims must satisfy, whoever signed it: a subject and a tenant that
//! can be stored (non-empty, at most 255 characters, no NUL) and that do not pose as an
//! API key, and a channel a token may carry (`interactive`, `mcp`, `agent`; never
//! `service_api`, which belongs to API keys).
use entity::AccessChannel;

use crate::error::ApiError;
use worker::app::Principal;

/// The longest subject or tenant id a token may carry (the columns are VARCHAR(255)).
const MAX_ID_LEN: usize = 255;

/// The caller the claims name; `exp` is in seconds, and the credential stays valid until
/// it plus `leeway`.
pub fn principal(
    subject: &str,
    tenant: &str,
    channel: Option<&str>,
    exp: i64,
    leeway: u64,
) -> Result<Principal, ApiError> {
    let channel = match channel {
        None => AccessChannel::Interactive,
        Some(name) => match AccessChannel::parse(name) {
            Some(AccessChannel::ServiceApi) | None => return Err(ApiError::Unauthenticated),
            Some(channel) => channel,
        },
    };
    // A NUL cannot be stored (PostgreSQL refuses it), so a claim holding one names nobody.
    let well_formed = |id: &str| !id.is_empty() && id.chars().count() <= MAX_ID_LEN && !id.contains('\0');
    if !well_formed(subject) || !well_formed(tenant) || subject.starts_with("api_key:") {
        return Err(ApiError::Unauthenticated);
    }
    let leeway = i64::try_from(leeway).unwrap_or(i64::MAX);
    Ok(Principal {
        tenant_id: tenant.to_owned(),
        subject_id: subject.to_owned(),
        channel,
        api_key: None,
        expires_at: Some(exp.saturating_add(leeway).saturating_mul(1000)),
        issuer: None,
    })
}

/// Whether an `aud` claim has a shape RFC 7519 allows: a string or a list of strings.
pub(super) fn audience_well_formed(aud: Option<&serde_json::Value>) -> bool {
    match aud {
        None | Some(serde_json::Value::String(_)) => true,
        Some(serde_json::Value::Array(items)) => items.iter().all(serde_json::Value::is_string),
        Some(_) => false,
    }
}
