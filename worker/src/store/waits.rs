//! Input waits (`research_task_waits`): what a paused task waits for from a person, and
//! how each wait ended. The lifecycle decides; these functions only read and write rows,
//! inside the transaction that locked the task.
use std::collections::HashMap;

use entity::research_task_wait as wait;
use sea_orm::{
    ActiveModelTrait as _, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel as _, QueryFilter,
    QueryOrder,
};
use uuid::Uuid;

/// Records a new wait.
pub async fn insert<C: ConnectionTrait>(txn: &C, row: wait::Model) -> Result<(), DbErr> {
    wait::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(txn).await?;
    Ok(())
}

/// Writes how a wait ended (its resolution fields set by the caller).
pub async fn save<C: ConnectionTrait>(txn: &C, row: wait::Model) -> Result<wait::Model, DbErr> {
    row.into_active_model().reset_all().update(txn).await
}

/// The task's waits, oldest first.
pub async fn of_task<C: ConnectionTrait>(conn: &C, task_id: Uuid) -> Result<Vec<wait::Model>, DbErr> {
    Ok(of_tasks(conn, &[task_id]).await?.remove(&task_id).unwrap_or_default())
}

/// The wait the task is in now, if any.
pub async fn open<C: ConnectionTrait>(conn: &C, task_id: Uuid) -> Result<Option<wait::Model>, DbErr> {
    wait::Entity::find()
        .filter(wait::Column::ResearchTaskJobId.eq(task_id))
        .filter(wait::Column::ResolvedAt.is_null())
        .one(conn)
        .await
}

/// The waits of many tasks (already read through their owner's scope), each oldest first.
pub async fn of_tasks<C: ConnectionTrait>(
    conn: &C,
    task_ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<wait::Model>>, DbErr> {
    if task_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = wait::Entity::find()
        .filter(wait::Column::ResearchTaskJobId.is_in(task_ids.iter().copied()))
        .order_by_asc(wait::Column::Since)
        .order_by_asc(wait::Column::Id)
        .all(conn)
        .await?;
    let mut grouped: HashMap<Uuid, Vec<wait::Model>> = HashMap::new();
    for row in rows {
        grouped.entry(row.research_task_job_id).or_default().push(row);
    }
    Ok(grouped)
}
