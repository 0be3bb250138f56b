//! Steering notes (`research_task_notes`): guidance added to a task, oldest first.
use std::collections::HashMap;

use entity::research_task_note as note;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};
use uuid::Uuid;

/// Adds a note (in the transaction that checked the task).
pub async fn insert<C: ConnectionTrait>(txn: &C, row: note::Model) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    note::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(txn).await?;
    Ok(())
}

/// How many notes the task has.
pub async fn count<C: ConnectionTrait>(conn: &C, task_id: Uuid) -> Result<u64, DbErr> {
    note::Entity::find().filter(note::Column::ResearchTaskJobId.eq(task_id)).count(conn).await
}

/// The task's notes, oldest first.
pub async fn of_task<C: ConnectionTrait>(conn: &C, task_id: Uuid) -> Result<Vec<note::Model>, DbErr> {
    Ok(of_tasks(conn, &[task_id]).await?.remove(&task_id).unwrap_or_default())
}

/// The notes of many tasks (already read through their owner's scope), each oldest first.
pub async fn of_tasks<C: ConnectionTrait>(
    conn: &C,
    task_ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<note::Model>>, DbErr> {
    if task_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = note::Entity::find()
        .filter(note::Column::ResearchTaskJobId.is_in(task_ids.iter().copied()))
        .order_by_asc(note::Column::CreatedAt)
        .order_by_asc(note::Column::Id)
        .all(conn)
        .await?;
    let mut grouped: HashMap<Uuid, Vec<note::Model>> = HashMap::new();
    for row in rows {
        grouped.entry(row.research_task_job_id).or_default().push(row);
    }
    Ok(grouped)
}
