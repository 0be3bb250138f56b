//! Deleting what users ask to delete, in the order the foreign keys demand (never with
//! them disabled): tasks (their journals, outbox entries, draft, trace context and webhook
//! deliveries follow by cascade) and answer traces before the permission snapshots they
//! name (`ON DELETE RESTRICT`), snapshots before the API keys they name (also RESTRICT).
//! Which rows go, in which batches and transactions, is the lifecycle's (`lifecycle::erase`).
use entity::{
    answer_trace, api_key, knowledge_document as document, knowledge_space as space,
    knowledge_space_deletion as deletion, member, permission_snapshot as snapshot, research_task_job as job,
    webhook_endpoint as endpoint,
};
use sea_orm::sea_query::{Expr, ExprTrait as _, OnConflict, Query};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

/// A kind of row a space's deletion takes in batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batched {
    /// Research tasks.
    Tasks,
    /// Answer traces.
    Traces,
    /// Documents (each with its passages and embeddings).
    Documents,
}

/// The ids of up to `limit` (or all) of the space's rows of `kind`.
pub async fn ids_in_space<C: ConnectionTrait>(
    conn: &C,
    kind: Batched,
    tenant_id: &str,
    space_id: Uuid,
    limit: Option<u64>,
) -> Result<Vec<Uuid>, DbErr> {
    // The three tables name their id, tenant and space columns alike.
    macro_rules! ids_of {
        ($table:ident) => {
            ids::<$table::Entity, _>(
                conn,
                [$table::Column::Id, $table::Column::TenantId, $table::Column::KnowledgeSpaceId],
                tenant_id,
                space_id,
                limit,
            )
            .await
        };
    }
    match kind {
        Batched::Tasks => ids_of!(job),
        Batched::Traces => ids_of!(answer_trace),
        Batched::Documents => ids_of!(document),
    }
}

async fn ids<E: EntityTrait, C: ConnectionTrait>(
    conn: &C,
    [id, tenant, space]: [E::Column; 3],
    tenant_id: &str,
    space_id: Uuid,
    limit: Option<u64>,
) -> Result<Vec<Uuid>, DbErr> {
    E::find()
        .select_only()
        .column(id)
        .filter(tenant.eq(tenant_id))
        .filter(space.eq(space_id))
        .limit(limit)
        .into_tuple()
        .all(conn)
        .await
}

/// Deletes the tasks `ids` with their answer traces; returns (tasks, traces) deleted.
pub async fn delete_tasks<C: ConnectionTrait>(txn: &C, ids: &[Uuid]) -> Result<(u64, u64), DbErr> {
    if ids.is_empty() {
        return Ok((0, 0));
    }
    let traces = answer_trace::Entity::delete_many()
        .filter(answer_trace::Column::ResearchTaskId.is_in(ids.iter().copied()))
        .exec(txn)
        .await?;
    let tasks = job::Entity::delete_many().filter(job::Column::Id.is_in(ids.iter().copied())).exec(txn).await?;
    Ok((tasks.rows_affected, traces.rows_affected))
}

/// Deletes the answer traces `ids`; returns how many.
pub async fn delete_traces<C: ConnectionTrait>(txn: &C, ids: &[Uuid]) -> Result<u64, DbErr> {
    Ok(answer_trace::Entity::delete_many()
        .filter(answer_trace::Column::Id.is_in(ids.iter().copied()))
        .exec(txn)
        .await?
        .rows_affected)
}

/// Deletes the documents `ids` (their passages and embeddings by cascade); returns how many.
pub async fn delete_documents<C: ConnectionTrait>(txn: &C, ids: &[Uuid]) -> Result<u64, DbErr> {
    Ok(document::Entity::delete_many()
        .filter(document::Column::Id.is_in(ids.iter().copied()))
        .exec(txn)
        .await?
        .rows_affected)
}

/// What the last of a space's deletion removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceRest {
    /// Answer traces.
    pub answer_traces: u64,
    /// Webhook endpoints (with their deliveries).
    pub webhook_endpoints: u64,
    /// Permission snapshots.
    pub permission_snapshots: u64,
    /// API keys.
    pub api_keys: u64,
    /// Membership rows.
    pub members: u64,
    /// The space itself (0 or 1).
    pub knowledge_spaces: u64,
}

/// Deletes what is left of a space once its tasks and documents are gone (small, with no
/// dependants but each other), the space itself and its deletion mark.
pub async fn delete_rest_of_space<C: ConnectionTrait>(
    txn: &C,
    tenant_id: &str,
    space_id: Uuid,
) -> Result<SpaceRest, DbErr> {
    macro_rules! delete_in_space {
        ($entity:ident) => {
            $entity::Entity::delete_many()
                .filter($entity::Column::TenantId.eq(tenant_id))
                .filter($entity::Column::KnowledgeSpaceId.eq(space_id))
                .exec(txn)
                .await?
                .rows_affected
        };
    }
    let rest = SpaceRest {
        answer_traces: delete_in_space!(answer_trace),
        webhook_endpoints: delete_in_space!(endpoint),
        permission_snapshots: delete_in_space!(snapshot),
        api_keys: delete_in_space!(api_key),
        members: delete_in_space!(member),
        knowledge_spaces: space::Entity::delete_many()
            .filter(space::Column::TenantId.eq(tenant_id))
            .filter(space::Column::Id.eq(space_id))
            .exec(txn)
            .await?
            .rows_affected,
    };
    deletion::Entity::delete_by_id(space_id).exec(txn).await?;
    Ok(rest)
}

/// Deletes those of the snapshots `ids` that no task and no trace names any more.
pub async fn drop_unreferenced_snapshots<C: ConnectionTrait>(txn: &C, ids: &[Uuid]) -> Result<u64, DbErr> {
    let by_task = Query::select()
        .expr(Expr::val(1))
        .from(job::Entity)
        .and_where(
            Expr::col((job::Entity, job::Column::PermissionSnapshotId))
                .equals((snapshot::Entity, snapshot::Column::Id)),
        )
        .to_owned();
    let by_trace = Query::select()
        .expr(Expr::val(1))
        .from(answer_trace::Entity)
        .and_where(
            Expr::col((answer_trace::Entity, answer_trace::Column::PermissionSnapshotId))
                .equals((snapshot::Entity, snapshot::Column::Id)),
        )
        .to_owned();
    let deleted = snapshot::Entity::delete_many()
        .filter(snapshot::Column::Id.is_in(ids.iter().copied()))
        .filter(Expr::exists(by_task).not())
        .filter(Expr::exists(by_trace).not())
        .exec(txn)
        .await?;
    Ok(deleted.rows_affected)
}

/// Marks the space as being deleted (a second mark keeps the first) and seals it: every
/// member removed and every key revoked, which kills every grant in it.
pub async fn seal_space<C: ConnectionTrait>(txn: &C, mark: deletion::Model, now: i64) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    let (tenant_id, space_id) = (mark.tenant_id.clone(), mark.knowledge_space_id);
    deletion::Entity::insert(mark.into_active_model().reset_all())
        .on_conflict(OnConflict::column(deletion::Column::KnowledgeSpaceId).do_nothing().to_owned())
        .exec_without_returning(txn)
        .await?;
    member::Entity::update_many()
        .col_expr(member::Column::RemovedAt, Expr::value(now))
        .col_expr(member::Column::Revision, Expr::col(member::Column::Revision).add(1))
        .col_expr(member::Column::UpdatedAt, Expr::value(now))
        .filter(member::Column::TenantId.eq(tenant_id.as_str()))
        .filter(member::Column::KnowledgeSpaceId.eq(space_id))
        .filter(member::Column::RemovedAt.is_null())
        .exec(txn)
        .await?;
    api_key::Entity::update_many()
        .col_expr(api_key::Column::RevokedAt, Expr::value(now))
        .col_expr(api_key::Column::UpdatedAt, Expr::value(now))
        .filter(api_key::Column::TenantId.eq(tenant_id.as_str()))
        .filter(api_key::Column::KnowledgeSpaceId.eq(space_id))
        .filter(api_key::Column::RevokedAt.is_null())
        .exec(txn)
        .await?;
    Ok(())
}

/// Up to `limit` space deletions under way.
pub async fn pending<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<deletion::Model>, DbErr> {
    deletion::Entity::find().limit(limit).all(conn).await
}

/// The tenant's spaces.
pub async fn tenant_spaces<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<Vec<Uuid>, DbErr> {
    space::Entity::find()
        .select_only()
        .column(space::Column::Id)
        .filter(space::Column::TenantId.eq(tenant_id))
        .into_tuple()
        .all(conn)
        .await
}

/// Whether the tenant has a space left.
pub async fn has_spaces<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<bool, DbErr> {
    Ok(space::Entity::find().filter(space::Column::TenantId.eq(tenant_id)).one(conn).await?.is_some())
}
