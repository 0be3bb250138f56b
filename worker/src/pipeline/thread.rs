//! What a turn of a research thread knows of its thread, read once per run: the earlier
//! turns its grant-holding reader may read now (newest first, their latest answers), bounded
//! by `KFS_THREAD_CONTEXT_CHARS`, and the standalone query planning made, read back from
//! the event that ended planning (or the plan-approval wait's). A task outside threads
//! costs one primary-key lookup.
use entity::{ProgressEventType, research_task_job as job, research_task_progress_event as progress};
use sea_orm::{DatabaseConnection, DbErr};

use crate::research::thread::{Context, ThreadView};
use crate::store::pages::PageKey;
use crate::store::{answer_traces, journal, threads};

/// Earlier turns read per statement: a follow-up reads only as many pages as its context
/// holds.
const TURNS_PER_READ: u64 = 32;

/// The thread view of `task`, `None` when it is no turn.
pub(super) async fn load(
    db: &DatabaseConnection,
    task: &job::Model,
    context_chars: usize,
    now: i64,
) -> Result<Option<ThreadView>, DbErr> {
    let Some(turn) = threads::turn_of(db, task.id).await? else {
        return Ok(None);
    };
    let mut context = Context::new(context_chars);
    let mut before = None;
    'pages: loop {
        let page = threads::earlier_turns(db, &turn, before, now, TURNS_PER_READ).await?;
        // Answers are read only while one may still fit.
        let traces = if context.wants_answers() {
            let owners: Vec<_> =
                page.iter().map(|row| (row.id, row.tenant_id.clone(), row.subject_id.clone())).collect();
            answer_traces::find_for_tasks(db, &owners).await?
        } else {
            Vec::new()
        };
        let full = page.len() as u64 == TURNS_PER_READ;
        before = page.last().map(|row| PageKey { at: row.created_at, id: row.id });
        for row in page {
            let answer =
                traces.iter().find(|trace| trace.research_task_id == Some(row.id)).map(|trace| trace.answer.clone());
            if !context.push(row.query, answer) {
                break 'pages;
            }
        }
        if !full {
            break;
        }
    }
    let mut view = ThreadView::new(context.into_turns(), standalone_of(db, task).await?);
    // Held up behind earlier turns (ENQUEUE): that wait is not the task's own time.
    view.waited_ms = threads::earlier_ended_at(db, &turn).await?.map_or(0, |ended| (ended - task.created_at).max(0));
    Ok(Some(view))
}

/// The standalone query planning recorded for `task`, if it did.
async fn standalone_of(db: &DatabaseConnection, task: &job::Model) -> Result<Option<String>, DbErr> {
    let events = journal::by_key_prefix::<progress::Entity, _>(db, task.id, "stage:retrieving").await?;
    let paused = journal::by_key_prefix::<progress::Entity, _>(db, task.id, "paused:").await?;
    Ok(events
        .iter()
        .chain(paused.iter().filter(|event| event.event_type == ProgressEventType::Paused))
        .find_map(|event| event.payload.get("standalone_query").and_then(|query| query.as_str()).map(str::to_owned)))
}
