//! Sending due deliveries: lease them (a lock token, fenced per row), POST each signed,
//! record the attempt, and settle the row under the same token: delivered on a 2xx, else
//! retried later with backoff and jitter, or `dead` after the last attempt. A sender that
//! dies mid-delivery lets its lock lapse; the next one sends the same `webhook-id` again.
use std::time::Instant;

use entity::{webhook_delivery as delivery, webhook_delivery_attempt as attempt, webhook_endpoint as endpoint};
use futures_util::future::join_all;
use sea_orm::{DatabaseConnection, DbErr};
use uuid::Uuid;

use super::settings::WebhookSettings;
use super::signing::message_id;
use crate::store::{self, webhooks::DeliverySettled};

/// What the sending loop needs.
#[derive(Clone)]
pub struct DeliveryPolicy {
    /// The settings.
    pub settings: WebhookSettings,
    /// The client (no redirects; the public-only resolver unless private is allowed).
    pub client: reqwest::Client,
    /// Who leases.
    pub worker_id: String,
}

/// Sends the due deliveries (up to the batch size, at once); returns how many were tried.
pub async fn deliver_due(db: &DatabaseConnection, policy: &DeliveryPolicy, now: i64) -> Result<usize, DbErr> {
    let token = Uuid::new_v4();
    let locked_until = now + policy.settings.lock_ms;
    let leased = store::webhooks::lease_due_deliveries(
        db,
        token,
        &policy.worker_id,
        locked_until,
        policy.settings.batch_size,
        now,
    )
    .await?;
    let tried = leased.len();
    let sends = leased.into_iter().map(|row| send_one(db, policy, row, token));
    for outcome in join_all(sends).await {
        outcome?;
    }
    Ok(tried)
}

/// What one attempt got.
struct Tried {
    status_code: Option<i32>,
    error: Option<String>,
}

async fn send_one(
    db: &DatabaseConnection,
    policy: &DeliveryPolicy,
    row: delivery::Model,
    token: Uuid,
) -> Result<(), DbErr> {
    let target = store::webhooks::find_endpoint(db, row.endpoint_id).await?;
    // Authorized at the moment of sending, not only at registration: an endpoint whose
    // owner lost the space (a key revoked or expired, a membership ended) gets nothing.
    let owner_holds = match &target {
        Some(target) => owner_holds(db, target, entity::now_millis()).await?,
        None => false,
    };
    let started = Instant::now();
    let tried = match &target {
        Some(target) if target.disabled_at.is_none() && owner_holds => post(policy, target, &row).await,
        Some(target) if target.disabled_at.is_none() => Tried {
            status_code: None,
            error: Some("the endpoint's owner no longer has access to the space".to_owned()),
        },
        _ => Tried { status_code: None, error: Some("the endpoint is disabled".to_owned()) },
    };
    let now = entity::now_millis();
    let number = row.attempts + 1;
    let attempt = attempt::Model {
        id: Uuid::now_v7(),
        delivery_id: row.id,
        attempt: number,
        status_code: tried.status_code,
        latency_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
        error: tried.error.clone(),
        attempted_at: now,
    };
    store::webhooks::insert_attempt(db, attempt).await?;
    let delivered = tried.status_code.is_some_and(|code| (200..300).contains(&code));
    let disabled = !owner_holds || target.as_ref().is_none_or(|target| target.disabled_at.is_some());
    let (status, next) = if delivered {
        ("delivered", row.next_attempt_at)
    } else if disabled || number >= policy.settings.max_attempts {
        ("dead", row.next_attempt_at)
    } else {
        ("pending", now + delay(&policy.settings, number))
    };
    let settled = DeliverySettled {
        status,
        attempts: number,
        next_attempt_at: next,
        last_status_code: tried.status_code,
        last_error: tried.error,
        delivered_at: delivered.then_some(now),
        now,
    };
    store::webhooks::settle_delivery(db, row.id, token, settled).await?;
    if status == "dead" {
        metrics::counter!("webhook_deliveries_dead_total").increment(1);
    }
    Ok(())
}

/// Whether the principal that registered `target` may still research in its space: the
/// API key it names is the space's, unrevoked and unexpired, or the subject is a current
/// member.
async fn owner_holds(db: &DatabaseConnection, target: &endpoint::Model, now: i64) -> Result<bool, DbErr> {
    if let Some(key_id) = target.subject_id.strip_prefix("api_key:") {
        let Ok(key_id) = key_id.parse::<Uuid>() else { return Ok(false) };
        let key = store::api_keys::find_any(db, key_id).await?;
        return Ok(key.is_some_and(|key| {
            key.tenant_id == target.tenant_id
                && key.knowledge_space_id == target.knowledge_space_id
                && key.revoked_at.is_none()
                && key.expires_at.is_none_or(|at| at > now)
        }));
    }
    let member =
        store::members::find_active(db, &target.tenant_id, target.knowledge_space_id, &target.subject_id).await?;
    Ok(member.is_some())
}

/// Exponential backoff from the base, capped, with up to a quarter of jitter either way.
fn delay(settings: &WebhookSettings, attempts: i32) -> i64 {
    let doubled = settings.retry_base_ms.saturating_mul(1_i64 << attempts.clamp(1, 30).saturating_sub(1));
    let capped = doubled.min(settings.retry_cap_ms).max(1);
    let jitter = rand::random_range(-(capped / 4)..=(capped / 4));
    (capped + jitter).max(1)
}

async fn post(policy: &DeliveryPolicy, target: &endpoint::Model, row: &delivery::Model) -> Tried {
    let failed = |error: String| Tried { status_code: None, error: Some(error) };
    // Checked again at send time: the endpoint was checked at registration, but a
    // literal address bypasses the resolver, and the rule may have changed since. Names
    // are resolved once, by the client's public-only resolver.
    if let Err(error) = super::address::check_before_send(&target.url, policy.settings.allow_private).await {
        return failed(error);
    }
    let signer = match standardwebhooks::Webhook::new(&target.secret) {
        Ok(signer) => signer,
        Err(error) => return failed(format!("the endpoint's secret is unusable: {error}")),
    };
    let id = message_id(row.id);
    let timestamp = entity::now_millis() / 1_000;
    let signature = match signer.sign(&id, timestamp, row.body.as_bytes()) {
        Ok(signature) => signature,
        Err(error) => return failed(format!("signing failed: {error}")),
    };
    let sent = policy
        .client
        .post(&target.url)
        .header("content-type", "application/json")
        .header(standardwebhooks::HEADER_WEBHOOK_ID, &id)
        .header(standardwebhooks::HEADER_WEBHOOK_TIMESTAMP, timestamp.to_string())
        .header(standardwebhooks::HEADER_WEBHOOK_SIGNATURE, signature)
        .body(row.body.clone())
        .send()
        .await;
    match sent {
        Ok(response) => {
            let code = i32::from(response.status().as_u16());
            let error = (!response.status().is_success()).then(|| format!("HTTP {code}"));
            Tried { status_code: Some(code), error }
        }
        Err(error) => failed(crate::remote::describe_send_error(&error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_schedule_spans_about_a_day_and_never_waits_past_the_cap() {
        let settings = WebhookSettings::default();
        let waits: Vec<i64> = (1..settings.max_attempts).map(|attempts| delay(&settings, attempts)).collect();
        assert!(waits.iter().all(|wait| *wait <= settings.retry_cap_ms * 5 / 4), "{waits:?}");
        assert!(waits[0] >= settings.retry_base_ms * 3 / 4 && waits[0] <= settings.retry_base_ms * 5 / 4);
        let hours = waits.iter().sum::<i64>() as f64 / 3_600_000.0;
        // 24.5 h without jitter; the jitter moves each wait by at most a quarter.
        assert!((18.0..31.0).contains(&hours), "{hours} h");
    }
}
