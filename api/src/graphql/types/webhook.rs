//! Webhook endpoints and their deliveries, as their owner sees them.
use async_graphql::{Context, Object, SimpleObject};
use chrono::{DateTime, Utc};
use entity::{
    ProgressEventType, Stage, webhook_delivery as delivery, webhook_delivery_attempt as attempt,
    webhook_endpoint as endpoint,
};
use sea_orm::Iterable;
use uuid::Uuid;

use super::datetime;
use crate::error::IntoGql;
use crate::graphql::context::state;
use crate::graphql::enums::{GqlDeliveryStatus, GqlEventType, GqlStage};
use worker::app::webhooks;

/// The event type an endpoint names `research_task.*`.
pub fn event_type_of(name: &str) -> Option<ProgressEventType> {
    sea_orm::ActiveEnum::try_from_value(&name.to_owned()).ok()
}

/// Where a principal's own tasks' events are delivered (Standard Webhooks).
pub struct WebhookEndpoint(pub endpoint::Model);

#[Object]
impl WebhookEndpoint {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn knowledge_space_id(&self) -> Uuid {
        self.0.knowledge_space_id
    }
    /// Where deliveries are POSTed.
    async fn url(&self) -> &str {
        &self.0.url
    }
    /// The event types delivered.
    async fn events(&self) -> Vec<GqlEventType> {
        let names = self.0.events.as_array().cloned().unwrap_or_default();
        names.iter().filter_map(|name| event_type_of(name.as_str()?)).map(GqlEventType::from).collect()
    }
    /// Whether it was disabled (nothing more is delivered to it).
    async fn disabled(&self) -> bool {
        self.0.disabled_at.is_some()
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        datetime(self.0.updated_at)
    }
}

/// An endpoint with its signing secret, shown this once (`whsec_…`, as Standard Webhooks
/// libraries take it).
#[derive(SimpleObject)]
pub struct CreatedWebhookEndpoint {
    /// The endpoint.
    pub endpoint: WebhookEndpoint,
    /// The signing secret; it is not shown again.
    pub secret: String,
}

/// One task event for one endpoint: sent at least once, with a stable `webhookId`.
pub struct WebhookDelivery(pub delivery::Model);

#[Object]
impl WebhookDelivery {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    /// The `webhook-id` header every attempt carries, for receivers to deduplicate.
    async fn webhook_id(&self) -> String {
        worker::webhooks::message_id(self.0.id)
    }
    async fn endpoint_id(&self) -> Uuid {
        self.0.endpoint_id
    }
    async fn task_id(&self) -> Uuid {
        self.0.research_task_job_id
    }
    async fn event_type(&self) -> Option<GqlEventType> {
        event_type_of(&self.0.event_type).map(GqlEventType::from)
    }
    /// The task's stage after the event.
    async fn stage(&self) -> Option<GqlStage> {
        Stage::iter().find(|stage| stage.as_str() == self.0.stage).map(GqlStage::from)
    }
    /// The progress event's sequence.
    async fn sequence(&self) -> i32 {
        self.0.sequence
    }
    async fn status(&self) -> GqlDeliveryStatus {
        match self.0.status.as_str() {
            "delivered" => GqlDeliveryStatus::Delivered,
            "dead" => GqlDeliveryStatus::Dead,
            _ => GqlDeliveryStatus::Pending,
        }
    }
    /// Attempts made in the current round.
    async fn attempts(&self) -> i32 {
        self.0.attempts
    }
    /// When the next attempt is due, while pending.
    async fn next_attempt_at(&self) -> Option<DateTime<Utc>> {
        (self.0.status == "pending").then(|| datetime(self.0.next_attempt_at))
    }
    async fn last_status_code(&self) -> Option<i32> {
        self.0.last_status_code
    }
    async fn last_error(&self) -> Option<&str> {
        self.0.last_error.as_deref()
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
    async fn delivered_at(&self) -> Option<DateTime<Utc>> {
        self.0.delivered_at.map(datetime)
    }
    /// Every attempt so far (the last 100), oldest first. One query per delivery, so it
    /// costs as a field of its own plus what it selects.
    #[graphql(complexity = "5 + child_complexity")]
    async fn attempt_log(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<WebhookDeliveryAttempt>> {
        let run = async {
            let rows = webhooks::attempts(&state(ctx)?.app, &self.0).await?;
            Ok::<_, crate::error::ApiError>(rows.into_iter().map(WebhookDeliveryAttempt).collect())
        };
        run.await.gql()
    }
}

/// What one attempt of a delivery got.
pub struct WebhookDeliveryAttempt(pub attempt::Model);

#[Object]
impl WebhookDeliveryAttempt {
    async fn attempt(&self) -> i32 {
        self.0.attempt
    }
    /// The HTTP status, when a response came.
    async fn status_code(&self) -> Option<i32> {
        self.0.status_code
    }
    async fn latency_ms(&self) -> i64 {
        self.0.latency_ms
    }
    async fn error(&self) -> Option<&str> {
        self.0.error.as_deref()
    }
    async fn attempted_at(&self) -> DateTime<Utc> {
        datetime(self.0.attempted_at)
    }
}
