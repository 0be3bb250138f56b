//! Webhook endpoints, webhook deliveries and their attempts (`webhook_endpoints`,
//! `webhook_deliveries`, `webhook_delivery_attempts`): as their owner reaches them
//! (scoped by tenant and subject, so another principal's ids answer as missing), as the
//! lifecycle queues deliveries, and as the webhook loop sends them. (An outbox entry is
//! something else: see `outbox`.)
use entity::{webhook_delivery as delivery, webhook_delivery_attempt as attempt, webhook_endpoint as endpoint};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    PaginatorTrait as _, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::Value;
use uuid::Uuid;

use super::pages::PageKey;

/// Whose endpoints: a task's creator in its tenant and space.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// The tenant.
    pub tenant_id: &'a str,
    /// The space.
    pub knowledge_space_id: uuid::Uuid,
    /// The subject that created the task.
    pub subject_id: &'a str,
}

/// The owner's enabled endpoints.
pub async fn enabled_endpoints<C: ConnectionTrait>(conn: &C, owner: Owner<'_>) -> Result<Vec<endpoint::Model>, DbErr> {
    endpoint::Entity::find()
        .filter(endpoint::Column::TenantId.eq(owner.tenant_id))
        .filter(endpoint::Column::KnowledgeSpaceId.eq(owner.knowledge_space_id))
        .filter(endpoint::Column::SubjectId.eq(owner.subject_id))
        .filter(endpoint::Column::DisabledAt.is_null())
        .all(conn)
        .await
}

/// Whether the owner has any enabled endpoint (so the common event nobody subscribed to
/// costs no lookup of endpoints).
pub async fn has_endpoint<C: ConnectionTrait>(conn: &C, owner: Owner<'_>) -> Result<bool, DbErr> {
    let count = endpoint::Entity::find()
        .filter(endpoint::Column::TenantId.eq(owner.tenant_id))
        .filter(endpoint::Column::KnowledgeSpaceId.eq(owner.knowledge_space_id))
        .filter(endpoint::Column::SubjectId.eq(owner.subject_id))
        .filter(endpoint::Column::DisabledAt.is_null())
        .count(conn)
        .await?;
    Ok(count > 0)
}

/// Writes webhook deliveries (decided by the caller), each idempotent on (endpoint,
/// task, sequence): an event replayed writes none twice.
pub async fn insert_deliveries<C: ConnectionTrait>(txn: &C, rows: Vec<delivery::Model>) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    if rows.is_empty() {
        return Ok(());
    }
    let on_conflict = OnConflict::columns([
        delivery::Column::EndpointId,
        delivery::Column::ResearchTaskJobId,
        delivery::Column::Sequence,
    ])
    .do_nothing()
    .to_owned();
    let rows = rows.into_iter().map(|row| row.into_active_model().reset_all());
    delivery::Entity::insert_many(rows).on_conflict(on_conflict).exec_without_returning(txn).await?;
    Ok(())
}

/// A new endpoint's fields.
pub struct NewEndpoint {
    /// The owner's tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// The owner.
    pub subject_id: String,
    /// The checked URL.
    pub url: String,
    /// The event types, `research_task.*`.
    pub events: Vec<String>,
    /// The signing secret.
    pub secret: String,
}

/// Registers an endpoint.
pub async fn create<C: ConnectionTrait>(conn: &C, new: NewEndpoint, now: i64) -> Result<endpoint::Model, DbErr> {
    let row = endpoint::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(new.tenant_id),
        knowledge_space_id: Set(new.knowledge_space_id),
        subject_id: Set(new.subject_id),
        url: Set(new.url),
        events: Set(Value::from(new.events)),
        secret: Set(new.secret),
        disabled_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    };
    endpoint::Entity::insert(row).exec_with_returning(conn).await
}

/// The owner's endpoint, if it is theirs.
pub async fn find_owned<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    id: Uuid,
) -> Result<Option<endpoint::Model>, DbErr> {
    endpoint::Entity::find_by_id(id)
        .filter(endpoint::Column::TenantId.eq(tenant_id))
        .filter(endpoint::Column::SubjectId.eq(subject_id))
        .one(conn)
        .await
}

/// The owner's endpoints in a space, oldest first.
pub async fn list_owned<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    space_id: Uuid,
    subject_id: &str,
) -> Result<Vec<endpoint::Model>, DbErr> {
    endpoint::Entity::find()
        .filter(endpoint::Column::TenantId.eq(tenant_id))
        .filter(endpoint::Column::KnowledgeSpaceId.eq(space_id))
        .filter(endpoint::Column::SubjectId.eq(subject_id))
        .order_by_asc(endpoint::Column::CreatedAt)
        .order_by_asc(endpoint::Column::Id)
        .limit(100)
        .all(conn)
        .await
}

/// Replaces the secret, or disables the endpoint.
pub async fn update<C: ConnectionTrait>(
    conn: &C,
    current: endpoint::Model,
    secret: Option<String>,
    disable: bool,
    now: i64,
) -> Result<endpoint::Model, DbErr> {
    let disabled_at = current.disabled_at;
    let mut row = current.into_active_model();
    if let Some(secret) = secret {
        row.secret = Set(secret);
    }
    if disable && disabled_at.is_none() {
        row.disabled_at = Set(Some(now));
    }
    row.updated_at = Set(now);
    row.update(conn).await
}

/// One page of an endpoint's deliveries, newest first.
pub async fn deliveries<C: ConnectionTrait>(
    conn: &C,
    endpoint_id: Uuid,
    after: Option<PageKey>,
    limit: u64,
) -> Result<Vec<delivery::Model>, DbErr> {
    let mut query = delivery::Entity::find().filter(delivery::Column::EndpointId.eq(endpoint_id));
    if let Some(after) = after {
        query = query.filter(Condition::any().add(delivery::Column::CreatedAt.lt(after.at)).add(
            Condition::all().add(delivery::Column::CreatedAt.eq(after.at)).add(delivery::Column::Id.lt(after.id)),
        ));
    }
    query.order_by_desc(delivery::Column::CreatedAt).order_by_desc(delivery::Column::Id).limit(limit).all(conn).await
}

/// A delivery whose endpoint the owner holds.
pub async fn find_owned_delivery<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    id: Uuid,
) -> Result<Option<delivery::Model>, DbErr> {
    let Some(row) = delivery::Entity::find_by_id(id).filter(delivery::Column::TenantId.eq(tenant_id)).one(conn).await?
    else {
        return Ok(None);
    };
    Ok(find_owned(conn, tenant_id, subject_id, row.endpoint_id).await?.map(|_| row))
}

/// Sends the delivery again, from now, with the same `webhook-id` and a fresh round of
/// attempts; a sender holding it keeps its lock (its result then settles nothing).
pub async fn redeliver<C: ConnectionTrait>(conn: &C, id: Uuid, now: i64) -> Result<Option<delivery::Model>, DbErr> {
    delivery::Entity::update_many()
        .col_expr(delivery::Column::Status, Expr::value("pending"))
        .col_expr(delivery::Column::Attempts, Expr::value(0))
        .col_expr(delivery::Column::NextAttemptAt, Expr::value(now))
        .col_expr(delivery::Column::LockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(delivery::Column::LockedBy, Expr::value(Option::<String>::None))
        .col_expr(delivery::Column::LockedUntil, Expr::value(Option::<i64>::None))
        .col_expr(delivery::Column::UpdatedAt, Expr::value(now))
        .filter(delivery::Column::Id.eq(id))
        .exec(conn)
        .await?;
    delivery::Entity::find_by_id(id).one(conn).await
}

/// A delivery's attempts, in order (at most the last 100).
pub async fn attempts<C: ConnectionTrait>(conn: &C, delivery_id: Uuid) -> Result<Vec<attempt::Model>, DbErr> {
    let mut rows = attempt::Entity::find()
        .filter(attempt::Column::DeliveryId.eq(delivery_id))
        .order_by_desc(attempt::Column::Attempt)
        .order_by_desc(attempt::Column::AttemptedAt)
        .limit(100)
        .all(conn)
        .await?;
    rows.reverse();
    Ok(rows)
}

/// A delivery free to send at `now`: pending, due, and not held by a live sender's lock.
fn free_and_due(now: i64) -> Condition {
    Condition::all()
        .add(delivery::Column::Status.eq("pending"))
        .add(delivery::Column::NextAttemptAt.lte(now))
        .add(Condition::any().add(delivery::Column::LockedUntil.is_null()).add(delivery::Column::LockedUntil.lt(now)))
}

/// Leases up to `limit` due deliveries to `locked_by` until `locked_until`, under one
/// `token`, and returns them: the rows' own condition again in the update, so of two
/// senders one wins each row.
pub async fn lease_due_deliveries<C: ConnectionTrait>(
    conn: &C,
    token: Uuid,
    locked_by: &str,
    locked_until: i64,
    limit: u64,
    now: i64,
) -> Result<Vec<delivery::Model>, DbErr> {
    let due: Vec<Uuid> = delivery::Entity::find()
        .select_only()
        .column(delivery::Column::Id)
        .filter(free_and_due(now))
        .order_by_asc(delivery::Column::NextAttemptAt)
        .order_by_asc(delivery::Column::Id)
        .limit(limit)
        .into_tuple()
        .all(conn)
        .await?;
    if due.is_empty() {
        return Ok(Vec::new());
    }
    delivery::Entity::update_many()
        .col_expr(delivery::Column::LockToken, Expr::value(token))
        .col_expr(delivery::Column::LockedBy, Expr::value(locked_by))
        .col_expr(delivery::Column::LockedUntil, Expr::value(locked_until))
        .filter(delivery::Column::Id.is_in(due))
        .filter(free_and_due(now))
        .exec(conn)
        .await?;
    delivery::Entity::find().filter(delivery::Column::LockToken.eq(token)).all(conn).await
}

/// The endpoint by id (any owner's: the sender checks its owner itself).
pub async fn find_endpoint<C: ConnectionTrait>(conn: &C, id: Uuid) -> Result<Option<endpoint::Model>, DbErr> {
    endpoint::Entity::find_by_id(id).one(conn).await
}

/// Records an attempt at a delivery.
pub async fn insert_attempt<C: ConnectionTrait>(conn: &C, row: attempt::Model) -> Result<(), DbErr> {
    attempt::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(conn).await?;
    Ok(())
}

/// How an attempt settles its delivery.
#[derive(Debug, Clone)]
pub struct DeliverySettled {
    /// `delivered`, `pending` (tried again at `next_attempt_at`) or `dead`.
    pub status: &'static str,
    /// Attempts so far.
    pub attempts: i32,
    /// When it is tried again.
    pub next_attempt_at: i64,
    /// The last HTTP status, if the endpoint answered.
    pub last_status_code: Option<i32>,
    /// The last error, if it failed.
    pub last_error: Option<String>,
    /// When it was delivered, if it was.
    pub delivered_at: Option<i64>,
    /// The time of the attempt.
    pub now: i64,
}

/// Settles the delivery under the lease `token`, releasing it: a sender whose lock
/// lapsed (and was taken) settles nothing.
pub async fn settle_delivery<C: ConnectionTrait>(
    conn: &C,
    id: Uuid,
    token: Uuid,
    settled: DeliverySettled,
) -> Result<(), DbErr> {
    let mut update = delivery::Entity::update_many()
        .col_expr(delivery::Column::Status, Expr::value(settled.status))
        .col_expr(delivery::Column::Attempts, Expr::value(settled.attempts))
        .col_expr(delivery::Column::NextAttemptAt, Expr::value(settled.next_attempt_at))
        .col_expr(delivery::Column::LockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(delivery::Column::LockedBy, Expr::value(Option::<String>::None))
        .col_expr(delivery::Column::LockedUntil, Expr::value(Option::<i64>::None))
        .col_expr(delivery::Column::LastStatusCode, Expr::value(settled.last_status_code))
        .col_expr(delivery::Column::LastError, Expr::value(settled.last_error))
        .col_expr(delivery::Column::UpdatedAt, Expr::value(settled.now));
    if let Some(at) = settled.delivered_at {
        update = update.col_expr(delivery::Column::DeliveredAt, Expr::value(at));
    }
    update.filter(delivery::Column::Id.eq(id)).filter(delivery::Column::LockToken.eq(token)).exec(conn).await?;
    Ok(())
}
