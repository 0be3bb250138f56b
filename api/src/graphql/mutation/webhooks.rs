//! Webhook endpoints: any principal that may create tasks in a space registers endpoints
//! for its own tasks there; only it sees or manages them (anyone else's ids answer
//! NOT_FOUND, as missing ones do).
use async_graphql::{Context, Object};
use entity::now_millis;
use uuid::Uuid;
use worker::store::begin_write;

use super::creating::begin_creating;
use crate::audit::{self, action};
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::{actor, principal, state};
use crate::graphql::types::{CreateWebhookEndpointInput, CreatedWebhookEndpoint, WebhookDelivery, WebhookEndpoint};
use worker::app::access::{owned_endpoint, space_access};
use worker::app::limits;
use worker::store::webhooks::{self, NewEndpoint};

/// The longest endpoint URL accepted.
const MAX_URL_CHARS: usize = 2_048;

/// Webhook mutations.
#[derive(Default)]
pub struct WebhookMutation;

#[Object]
impl WebhookMutation {
    /// Registers an endpoint for the caller's own tasks in a space; the signing secret is
    /// in the answer, this once.
    async fn create_webhook_endpoint(
        &self,
        ctx: &Context<'_>,
        input: CreateWebhookEndpointInput,
    ) -> async_graphql::Result<CreatedWebhookEndpoint> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            limits::text("url", &input.url, MAX_URL_CHARS)?;
            if input.events.is_empty() {
                return Err(ApiError::bad_input("events must name at least one event type"));
            }
            space_access(&app.db, caller, input.knowledge_space_id).await?.ok_or(ApiError::NotFound)?;
            let url =
                worker::webhooks::address::check_url(input.url.trim(), app.settings.worker.webhooks.allow_private)
                    .await
                    .map_err(ApiError::bad_input)?;
            let mut events: Vec<String> =
                input.events.into_iter().map(|event| worker::webhooks::event_name(event.into())).collect();
            events.sort();
            events.dedup();
            let secret = worker::webhooks::new_secret();
            let new = NewEndpoint {
                tenant_id: caller.tenant_id.clone(),
                knowledge_space_id: input.knowledge_space_id,
                subject_id: caller.subject_id.clone(),
                url: url.to_string(),
                events,
                secret: secret.clone(),
            };
            let now = now_millis();
            let txn = begin_creating(&app.db, &caller.tenant_id).await?;
            let endpoint = webhooks::create(&txn, new, now).await?;
            audit::record(&txn, actor(ctx)?, endpoint_entry(&endpoint, action::WEBHOOK_CREATED), now).await?;
            txn.commit().await?;
            Ok(CreatedWebhookEndpoint { endpoint: WebhookEndpoint(endpoint), secret })
        };
        run.await.gql()
    }

    /// Replaces an endpoint's signing secret; the new one is in the answer, this once.
    /// Deliveries sent from now on are signed with it.
    async fn rotate_webhook_secret(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
    ) -> async_graphql::Result<CreatedWebhookEndpoint> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let current = owned_endpoint(&app.db, caller, id).await?;
            let secret = worker::webhooks::new_secret();
            let now = now_millis();
            let txn = begin_creating(&app.db, &caller.tenant_id).await?;
            let endpoint = webhooks::update(&txn, current, Some(secret.clone()), false, now).await?;
            audit::record(&txn, actor(ctx)?, endpoint_entry(&endpoint, action::WEBHOOK_SECRET_ROTATED), now).await?;
            txn.commit().await?;
            Ok(CreatedWebhookEndpoint { endpoint: WebhookEndpoint(endpoint), secret })
        };
        run.await.gql()
    }

    /// Stops deliveries to an endpoint for good (pending ones end `DEAD`).
    async fn disable_webhook_endpoint(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<WebhookEndpoint> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let current = owned_endpoint(&app.db, caller, id).await?;
            let now = now_millis();
            let txn = begin_write(&app.db).await?;
            let endpoint = webhooks::update(&txn, current, None, true, now).await?;
            audit::record(&txn, actor(ctx)?, endpoint_entry(&endpoint, action::WEBHOOK_DISABLED), now).await?;
            txn.commit().await?;
            Ok(WebhookEndpoint(endpoint))
        };
        run.await.gql()
    }

    /// Sends a delivery again, now, with the same `webhook-id` and a fresh round of attempts.
    async fn redeliver_webhook(&self, ctx: &Context<'_>, delivery_id: Uuid) -> async_graphql::Result<WebhookDelivery> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let delivery = webhooks::find_owned_delivery(&app.db, &caller.tenant_id, &caller.subject_id, delivery_id)
                .await?
                .ok_or(ApiError::NotFound)?;
            owned_endpoint(&app.db, caller, delivery.endpoint_id).await?;
            let row = webhooks::redeliver(&app.db, delivery_id, now_millis()).await?.ok_or(ApiError::NotFound)?;
            app.notifier.work_due();
            Ok(WebhookDelivery(row))
        };
        run.await.gql()
    }
}

/// The audit entry of an action on `endpoint`: its id and events, never its URL (which
/// may carry a token) or its secret.
fn endpoint_entry<'a>(endpoint: &'a entity::webhook_endpoint::Model, action: &'static str) -> audit::Entry<'a> {
    audit::Entry {
        tenant_id: &endpoint.tenant_id,
        knowledge_space_id: Some(endpoint.knowledge_space_id),
        action,
        target_type: "webhook_endpoint",
        target_id: Some(endpoint.id.to_string()),
        details: serde_json::json!({ "events": endpoint.events }),
    }
}
