//! W3C trace contexts stored with the tasks they created (`research_task_trace_contexts`).
use entity::research_task_trace_context as context;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait};
use uuid::Uuid;

/// Stores a task's trace context (in its creating transaction).
pub async fn insert<C: ConnectionTrait>(txn: &C, row: context::Model) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    context::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(txn).await?;
    Ok(())
}

/// The task's stored trace context, if it has one.
pub async fn find<C: ConnectionTrait>(conn: &C, job_id: Uuid) -> Result<Option<context::Model>, DbErr> {
    context::Entity::find_by_id(job_id).one(conn).await
}
