//! Answer drafts (`research_task_answer_drafts`): the answer as the lease holder has
//! written it so far, one row per task, read by `researchTaskAnswer` subscribers in every
//! process. A draft's generation says which attempt at the answer its text belongs to:
//! within one generation the text only grows.
use entity::research_task_answer_draft as draft;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait};
use uuid::Uuid;

/// The task's draft, if it has one.
pub async fn find<C: ConnectionTrait>(conn: &C, job_id: Uuid) -> Result<Option<draft::Model>, DbErr> {
    draft::Entity::find_by_id(job_id).one(conn).await
}

/// The draft row for `text` in `generation`.
pub fn row(tenant_id: &str, job_id: Uuid, generation: i32, text: &str, now: i64) -> draft::ActiveModel {
    draft::ActiveModel {
        research_task_job_id: Set(job_id),
        tenant_id: Set(tenant_id.to_owned()),
        generation: Set(generation),
        answer: Set(text.to_owned()),
        char_count: Set(i32::try_from(text.chars().count()).unwrap_or(i32::MAX)),
        updated_at: Set(now),
    }
}

/// Writes the draft as given (its generation decided by the caller).
pub async fn upsert<C: ConnectionTrait>(txn: &C, row: draft::ActiveModel) -> Result<(), DbErr> {
    let on_conflict = OnConflict::column(draft::Column::ResearchTaskJobId)
        .update_columns([
            draft::Column::Generation,
            draft::Column::Answer,
            draft::Column::CharCount,
            draft::Column::UpdatedAt,
        ])
        .to_owned();
    draft::Entity::insert(row).on_conflict(on_conflict).exec_without_returning(txn).await?;
    Ok(())
}

/// Sets the draft to the task's final `answer`: it stays in its generation when what it
/// held is the start of the answer (subscribers then only receive the rest), and moves to
/// the next otherwise (they start over). One upsert: the database compares the draft with
/// the answer in code points on both backends (`substr` and `length` count characters).
pub async fn finish<C: ConnectionTrait>(
    txn: &C,
    tenant_id: &str,
    job_id: Uuid,
    answer: &str,
    now: i64,
) -> Result<(), DbErr> {
    let kept_or_next = Expr::cust(
        "CASE WHEN substr(\"excluded\".\"answer\", 1, length(\"research_task_answer_drafts\".\"answer\")) \
         = \"research_task_answer_drafts\".\"answer\" THEN \"research_task_answer_drafts\".\"generation\" \
         ELSE \"research_task_answer_drafts\".\"generation\" + 1 END",
    );
    let on_conflict = OnConflict::column(draft::Column::ResearchTaskJobId)
        .value(draft::Column::Generation, kept_or_next)
        .update_columns([draft::Column::Answer, draft::Column::CharCount, draft::Column::UpdatedAt])
        .to_owned();
    draft::Entity::insert(row(tenant_id, job_id, 1, answer, now))
        .on_conflict(on_conflict)
        .exec_without_returning(txn)
        .await?;
    Ok(())
}

/// Deletes the task's draft (its answer trace was deleted: no copy of the answer stays).
pub async fn delete<C: ConnectionTrait>(txn: &C, job_id: Uuid) -> Result<(), DbErr> {
    draft::Entity::delete_by_id(job_id).exec(txn).await?;
    Ok(())
}
