//! The audit log (`audit_events`): rows appended in the transaction of the action they
//! record, read newest first, and deleted only with their tenant.
use entity::audit_event as event;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use super::pages::{PageKey, before};

/// Appends an audit event (decided by the caller).
pub async fn insert<C: ConnectionTrait>(conn: &C, row: event::Model) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    event::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(conn).await?;
    Ok(())
}

/// Deletes up to `limit` of the tenant's audit events; returns how many.
pub async fn delete_some_of_tenant<C: ConnectionTrait>(txn: &C, tenant_id: &str, limit: u64) -> Result<u64, DbErr> {
    let ids: Vec<Uuid> = event::Entity::find()
        .select_only()
        .column(event::Column::Id)
        .filter(event::Column::TenantId.eq(tenant_id))
        .limit(limit)
        .into_tuple()
        .all(txn)
        .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(event::Entity::delete_many().filter(event::Column::Id.is_in(ids)).exec(txn).await?.rows_affected)
}

/// A newest-first page of events, of one tenant and one space when they are given. A
/// tenant being erased has nothing readable, its log included, from the moment it was
/// sealed (its rows go in batches after).
pub async fn page<C: ConnectionTrait>(
    conn: &C,
    tenant_id: Option<&str>,
    knowledge_space_id: Option<Uuid>,
    after: Option<PageKey>,
    limit: u64,
) -> Result<Vec<event::Model>, DbErr> {
    use entity::tenant_erasure as erasure;
    use sea_orm::QueryOrder as _;
    use sea_orm::sea_query::{Expr, ExprTrait as _, Query};
    let mut query = event::Entity::find();
    if let Some(space) = knowledge_space_id {
        query = query.filter(event::Column::KnowledgeSpaceId.eq(space));
    }
    if let Some(tenant) = tenant_id {
        query = query.filter(event::Column::TenantId.eq(tenant));
    }
    if let Some(key) = after {
        query = query.filter(before(event::Column::CreatedAt, event::Column::Id, key));
    }
    let sealed = Query::select()
        .expr(Expr::val(1))
        .from(erasure::Entity)
        .and_where(
            Expr::col((erasure::Entity, erasure::Column::TenantId)).equals((event::Entity, event::Column::TenantId)),
        )
        .to_owned();
    query = query.filter(Expr::exists(sealed).not());
    query.order_by_desc(event::Column::CreatedAt).order_by_desc(event::Column::Id).limit(limit).all(conn).await
}
