//! Webhook endpoint mutations (`worker::app::webhooks`): any principal that may create
//! tasks in a space registers endpoints for its own tasks there; only it sees or manages
//! them.
use async_graphql::{Context, Object};
use uuid::Uuid;
use worker::app::webhooks::{self, EndpointRequest};

use crate::error::IntoGql;
use crate::graphql::context::{actor, state};
use crate::graphql::types::{CreateWebhookEndpointInput, CreatedWebhookEndpoint, WebhookDelivery, WebhookEndpoint};

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
            let request = EndpointRequest {
                knowledge_space_id: input.knowledge_space_id,
                url: input.url,
                events: input.events.into_iter().map(Into::into).collect(),
            };
            let created = webhooks::create(&state(ctx)?.app, actor(ctx)?, request).await?;
            Ok(CreatedWebhookEndpoint { endpoint: WebhookEndpoint(created.endpoint), secret: created.secret })
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
            let rotated = webhooks::rotate_secret(&state(ctx)?.app, actor(ctx)?, id).await?;
            Ok(CreatedWebhookEndpoint { endpoint: WebhookEndpoint(rotated.endpoint), secret: rotated.secret })
        };
        run.await.gql()
    }

    /// Stops deliveries to an endpoint for good (pending ones end `DEAD`).
    async fn disable_webhook_endpoint(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<WebhookEndpoint> {
        let run = async { webhooks::disable(&state(ctx)?.app, actor(ctx)?, id).await.map(WebhookEndpoint) };
        run.await.gql()
    }

    /// Sends a delivery again, now, with the same `webhook-id` and a fresh round of attempts.
    async fn redeliver_webhook(&self, ctx: &Context<'_>, delivery_id: Uuid) -> async_graphql::Result<WebhookDelivery> {
        let run = async { webhooks::redeliver(&state(ctx)?.app, actor(ctx)?, delivery_id).await.map(WebhookDelivery) };
        run.await.gql()
    }
}
