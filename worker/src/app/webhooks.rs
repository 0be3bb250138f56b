//! Webhook endpoints: any principal that may create tasks in a space registers endpoints
//! for its own tasks there; only it sees or manages them (anyone else's ids answer
//! NOT_FOUND, as missing ones do).
use entity::{ProgressEventType, now_millis, webhook_delivery, webhook_endpoint as endpoint};
use uuid::Uuid;

use super::access::{owned_endpoint, space_access};
use super::audit::{self, Actor, action};
use super::limits;
use super::writes::{begin, begin_creating};
use super::{App, AppError};
use crate::store::webhooks::{self, NewEndpoint};

/// The longest endpoint URL accepted.
pub const MAX_URL_CHARS: usize = 2_048;

/// An endpoint to register, as a channel received it.
pub struct EndpointRequest {
    /// The space whose tasks (the caller's own) it follows.
    pub knowledge_space_id: Uuid,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The event types it wants (at least one).
    pub events: Vec<ProgressEventType>,
}

/// An endpoint with its signing secret, the one time it is shown.
pub struct EndpointWithSecret {
    /// The endpoint.
    pub endpoint: endpoint::Model,
    /// Its signing secret.
    pub secret: String,
}

/// Registers an endpoint for the caller's own tasks in a space.
pub async fn create(app: &App, actor: Actor<'_>, request: EndpointRequest) -> Result<EndpointWithSecret, AppError> {
    let caller = actor.principal;
    limits::text("url", &request.url, MAX_URL_CHARS)?;
    if request.events.is_empty() {
        return Err(AppError::bad_input("events must name at least one event type"));
    }
    space_access(&app.db, caller, request.knowledge_space_id).await?.ok_or(AppError::NotFound)?;
    let url = crate::webhooks::address::check_url(request.url.trim(), app.rules.webhooks_allow_private)
        .await
        .map_err(AppError::bad_input)?;
    let mut events: Vec<String> = request.events.into_iter().map(crate::webhooks::event_name).collect();
    events.sort();
    events.dedup();
    let secret = crate::webhooks::new_secret();
    let new = NewEndpoint {
        tenant_id: caller.tenant_id.clone(),
        knowledge_space_id: request.knowledge_space_id,
        subject_id: caller.subject_id.clone(),
        url: url.to_string(),
        events,
        secret: secret.clone(),
    };
    let now = now_millis();
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    let endpoint = webhooks::create(&txn, new, now).await?;
    audit::record(&txn, actor, endpoint_entry(&endpoint, action::WEBHOOK_CREATED), now).await?;
    txn.commit().await?;
    Ok(EndpointWithSecret { endpoint, secret })
}

/// Replaces an endpoint's signing secret; deliveries sent from now on are signed with it.
pub async fn rotate_secret(app: &App, actor: Actor<'_>, id: Uuid) -> Result<EndpointWithSecret, AppError> {
    let caller = actor.principal;
    let current = owned_endpoint(&app.db, caller, id).await?;
    let secret = crate::webhooks::new_secret();
    let now = now_millis();
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    let endpoint = webhooks::update(&txn, current, Some(secret.clone()), false, now).await?;
    audit::record(&txn, actor, endpoint_entry(&endpoint, action::WEBHOOK_SECRET_ROTATED), now).await?;
    txn.commit().await?;
    Ok(EndpointWithSecret { endpoint, secret })
}

/// Stops deliveries to an endpoint for good (pending ones end `DEAD`).
pub async fn disable(app: &App, actor: Actor<'_>, id: Uuid) -> Result<endpoint::Model, AppError> {
    let current = owned_endpoint(&app.db, actor.principal, id).await?;
    let now = now_millis();
    let txn = begin(&app.db).await?;
    let endpoint = webhooks::update(&txn, current, None, true, now).await?;
    audit::record(&txn, actor, endpoint_entry(&endpoint, action::WEBHOOK_DISABLED), now).await?;
    txn.commit().await?;
    Ok(endpoint)
}

/// Sends a delivery of the caller's again, now, with the same `webhook-id` and a fresh
/// round of attempts.
pub async fn redeliver(app: &App, actor: Actor<'_>, delivery_id: Uuid) -> Result<webhook_delivery::Model, AppError> {
    let caller = actor.principal;
    let delivery = webhooks::find_owned_delivery(&app.db, &caller.tenant_id, &caller.subject_id, delivery_id)
        .await?
        .ok_or(AppError::NotFound)?;
    owned_endpoint(&app.db, caller, delivery.endpoint_id).await?;
    let row = webhooks::redeliver(&app.db, delivery_id, now_millis()).await?.ok_or(AppError::NotFound)?;
    app.notifier.work_due();
    Ok(row)
}

/// The audit entry of an action on `endpoint`: its id and events, never its URL (which
/// may carry a token) or its secret.
fn endpoint_entry<'a>(endpoint: &'a endpoint::Model, action: &'static str) -> audit::Entry<'a> {
    audit::Entry {
        tenant_id: &endpoint.tenant_id,
        knowledge_space_id: Some(endpoint.knowledge_space_id),
        action,
        target_type: "webhook_endpoint",
        target_id: Some(endpoint.id.to_string()),
        details: serde_json::json!({ "events": endpoint.events }),
    }
}

/// The attempts of a delivery the caller was shown, oldest first.
pub async fn attempts(
    app: &App,
    delivery: &webhook_delivery::Model,
) -> Result<Vec<entity::webhook_delivery_attempt::Model>, AppError> {
    Ok(webhooks::attempts(&app.db, delivery.id).await?)
}
