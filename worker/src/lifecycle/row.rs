//! Reading a job row under its lock, and the bookkeeping every update shares.
use entity::{now_millis, research_task_job};
use sea_orm::{
    ActiveValue::Set, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, QuerySelect, sea_query::LockType,
};
use uuid::Uuid;

/// Reads the job and locks its row until the transaction ends. On PostgreSQL this is
/// `SELECT … FOR UPDATE`; SQLite write transactions begin IMMEDIATE and so already hold
/// the database's one write lock.
pub async fn lock_job<C: ConnectionTrait>(txn: &C, id: Uuid) -> Result<Option<research_task_job::Model>, DbErr> {
    let mut query = research_task_job::Entity::find_by_id(id);
    if txn.get_database_backend() == DatabaseBackend::Postgres {
        query = query.lock(LockType::Update);
    }
    query.one(txn).await
}

/// Marks an update: `row_version + 1` and `updated_at = now`.
pub fn touch(model: &research_task_job::Model, active: &mut research_task_job::ActiveModel) {
    active.row_version = Set(model.row_version + 1);
    active.updated_at = Set(now_millis().max(model.updated_at));
}
