//! Answer traces (`answer_traces`): a completed task's answer and the evidence it cites,
//! bound to the task's subject and grant.
use entity::answer_trace as trace;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait};

/// Writes an answer trace (decided by the caller) and returns it.
pub async fn insert<C: ConnectionTrait>(txn: &C, row: trace::Model) -> Result<trace::Model, DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    trace::Entity::insert(row.into_active_model().reset_all()).exec_with_returning(txn).await
}

/// The answer trace, if there is one.
pub async fn find<C: ConnectionTrait>(conn: &C, id: uuid::Uuid) -> Result<Option<trace::Model>, DbErr> {
    trace::Entity::find_by_id(id).one(conn).await
}
