//! Webhook endpoints and deliveries, as their owner reaches them: every read and write is
//! scoped by tenant and subject, so another principal's ids answer as missing.
use entity::{webhook_delivery as delivery, webhook_delivery_attempt as attempt, webhook_endpoint as endpoint};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect, sea_query::Expr,
};
use serde_json::Value;
use uuid::Uuid;

use super::PageKey;

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
