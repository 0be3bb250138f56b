//! Admission: who a request comes from, and its rate charged, before anything else about
//! it is read (a POST's body, a WebSocket's first message). A principal is charged against
//! its own and its tenant's buckets; a request without a credential, or with one that does
//! not authenticate, against its client address, so guessing credentials is no way around
//! the limit and an unknown bearer buys no more reading than no bearer at all.
use std::net::IpAddr;

use axum::http::{HeaderMap, header};

use crate::auth::authenticate_for;
use crate::error::ApiError;
use crate::rate::Checked;
use crate::state::AppState;
use worker::app::Principal;

/// A request admitted: its caller (none without a credential) and the buckets charged.
pub struct Admitted {
    /// The authenticated caller, if the request carried a credential.
    pub principal: Option<Principal>,
    /// The buckets the admission touched, for the response's rate headers.
    pub checked: Checked,
}

/// A request refused at admission: why, and the buckets charged.
pub struct Refused {
    /// RATE_LIMITED past a rate, UNAUTHENTICATED for a credential that does not
    /// authenticate, SERVICE_UNAVAILABLE while the database cannot check an API key.
    pub error: ApiError,
    /// The buckets the admission touched.
    pub checked: Checked,
}

/// Authenticates `headers`' `Authorization` and charges the request's rate.
pub async fn admit(state: &AppState, headers: &HeaderMap, peer: Option<IpAddr>) -> Result<Admitted, Refused> {
    admit_for(state, headers, peer, None).await
}

/// [`admit`] for a request to `resource` (the MCP resource's URL), which a JWT may name as
/// its audience.
pub async fn admit_for(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    resource: Option<&str>,
) -> Result<Admitted, Refused> {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
    let authenticated = authenticate_for(&state.db, &state.identity, authorization, resource).await;
    let checked = match (&authenticated, peer) {
        (Ok(Some(principal)), _) => state.rates.request(principal),
        // The database could not say whether the key is valid: not the caller's fault.
        (Err(ApiError::Unavailable(_)), _) | (_, None) => Checked::default(),
        (_, Some(peer)) => state.rates.anonymous(peer),
    };
    if let Some(wait) = checked.refused_for() {
        return Err(Refused { error: ApiError::rate_limited(wait), checked });
    }
    match authenticated {
        Ok(principal) => Ok(Admitted { principal, checked }),
        Err(error) => Err(Refused { error, checked }),
    }
}
