//! Research threads: a conversation of research tasks, one subject's in one space. A
//! thread is read only by its creator, and only while they may still read its space (a
//! member removed loses their threads until re-added); anyone else's thread answers as a
//! missing one does. Its turns are tasks created with its id, listed oldest first, and
//! only those whose grant holds now.
use entity::{research_task_job as job, research_thread as thread};
use serde_json::{Value, json};
use uuid::Uuid;

use super::access::space_access;
use super::audit::{self, Actor, action};
use super::limits::{self, MAX_TITLE_CHARS};
use super::lists::{Listed, Page, PageKey};
use super::writes::{begin, begin_creating};
use super::{App, AppError, Principal};
use crate::store::threads;

/// What a new turn does when its thread has an unfinished turn (queued, running, paused
/// by its owner or waiting for a person).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MultitaskStrategy {
    /// Refuse the new turn: CONFLICT naming the turn in flight (decided under the
    /// thread's lock, so of turns sent at once exactly one wins).
    Reject,
    /// The new turn waits, queued and unleased, until every earlier turn has ended
    /// (however it ends), then runs with them as context.
    #[default]
    Enqueue,
    /// Every unfinished turn is canceled (what it wrote stays), and the new one runs with
    /// them as context.
    Interrupt,
    /// Every unfinished turn is canceled and deleted: later turns never see them.
    Rollback,
}

/// A turn about to be added.
#[derive(Debug, Clone, Copy)]
pub(super) struct NextTurn {
    /// Its thread.
    pub thread_id: Uuid,
    /// The space the task is asked in.
    pub space_id: Uuid,
    /// What to do about unfinished turns.
    pub strategy: MultitaskStrategy,
    /// The task a repeated idempotency key names, which the strategy never touches.
    pub replay: Option<Uuid>,
}

/// Checks the caller's thread for a new turn and carries out its strategy on the turns
/// in flight (`REJECT` is decided when the turn is written, under the thread's lock).
pub(super) async fn prepare_turn(
    app: &App,
    caller: &Principal,
    turn: NextTurn,
) -> Result<crate::lifecycle::ThreadTurn, AppError> {
    // Another subject's or tenant's thread answers as a missing one.
    let found = find(app, caller, turn.thread_id).await?.ok_or(AppError::NotFound)?;
    if found.knowledge_space_id != turn.space_id {
        return Err(AppError::bad_input("knowledgeSpaceId must be the thread's space"));
    }
    let replayed = match turn.replay {
        Some(id) => threads::turn_of(&app.db, id).await?.is_some_and(|row| row.research_thread_id == turn.thread_id),
        None => false,
    };
    if !replayed && matches!(turn.strategy, MultitaskStrategy::Interrupt | MultitaskStrategy::Rollback) {
        let actor = Actor { principal: caller, request_id: None };
        for task in threads::unfinished_turns(&app.db, turn.thread_id).await? {
            let ended = match turn.strategy {
                MultitaskStrategy::Rollback => super::deletes::task(app, actor, task.id).await,
                _ => {
                    let task = crate::lifecycle::TaskRef {
                        id: task.id,
                        tenant_id: caller.tenant_id.clone(),
                        subject_id: caller.subject_id.clone(),
                        expected_row_version: None,
                    };
                    let canceled = crate::lifecycle::cancel(&app.db, &app.notifier, &task, entity::now_millis()).await;
                    canceled.map(|_| ()).map_err(AppError::from)
                }
            };
            match ended {
                // It ended (or went) meanwhile: nothing left to stop.
                Ok(()) | Err(AppError::NotFound | AppError::Conflict { .. }) => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(crate::lifecycle::ThreadTurn {
        thread_id: turn.thread_id,
        max_turns: app.rules.thread_max_turns,
        reject_in_flight: turn.strategy == MultitaskStrategy::Reject && !replayed,
    })
}

/// A thread to create, as a channel received it.
#[derive(Debug, Clone, Default)]
pub struct ThreadRequest {
    /// The space every turn researches.
    pub knowledge_space_id: Uuid,
    /// A title, at most 512 characters.
    pub title: Option<String>,
    /// The client's metadata, a JSON object.
    pub metadata: Option<Value>,
}

/// Changes to a thread: an omitted field keeps its value.
#[derive(Debug, Clone, Default)]
pub struct ThreadChanges {
    /// The new title (`Some(None)` clears it).
    pub title: Option<Option<String>>,
    /// The new metadata.
    pub metadata: Option<Value>,
}

/// A title checked: at most [`MAX_TITLE_CHARS`] characters; blank is no title.
fn title(value: Option<String>) -> Result<Option<String>, AppError> {
    match value {
        Some(title) if title.chars().count() > MAX_TITLE_CHARS => {
            Err(AppError::bad_input(format!("title must be at most {MAX_TITLE_CHARS} characters")))
        }
        Some(title) if title.trim().is_empty() => Ok(None),
        other => Ok(other),
    }
}

/// Creates a thread for `caller` in a space they may read.
pub async fn create(app: &App, caller: &Principal, request: ThreadRequest) -> Result<thread::Model, AppError> {
    let title = title(request.title)?;
    let metadata = limits::json_object("metadata", request.metadata)?;
    if space_access(&app.db, caller, request.knowledge_space_id).await?.is_none() {
        return Err(AppError::NotFound);
    }
    let now = entity::now_millis();
    let row = thread::Model {
        id: Uuid::now_v7(),
        tenant_id: caller.tenant_id.clone(),
        knowledge_space_id: request.knowledge_space_id,
        subject_id: caller.subject_id.clone(),
        title,
        metadata,
        created_at: now,
        updated_at: now,
    };
    // Under the tenant's creating guard: nothing new for a tenant being erased.
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    threads::insert(&txn, row.clone()).await?;
    txn.commit().await.map_err(AppError::from)?;
    metrics::counter!("research_threads_created_total").increment(1);
    Ok(row)
}

/// The thread `id`, when it is the caller's and they may still read its space.
pub async fn find(app: &App, caller: &Principal, id: Uuid) -> Result<Option<thread::Model>, AppError> {
    let Some(found) = threads::find_owned(&app.db, &caller.tenant_id, &caller.subject_id, id).await? else {
        return Ok(None);
    };
    if space_access(&app.db, caller, found.knowledge_space_id).await?.is_none() {
        return Ok(None);
    }
    Ok(Some(found))
}

/// Where a followed thread stands for its follower.
#[derive(Debug, Clone)]
pub enum Standing {
    /// The caller may read it.
    Readable(thread::Model),
    /// It is the caller's, but they may no longer read its space.
    Unreadable,
    /// It is gone (or never was the caller's).
    Gone,
}

/// How the caller's thread `id` stands now.
pub async fn standing(app: &App, caller: &Principal, id: Uuid) -> Result<Standing, AppError> {
    let Some(found) = threads::find_owned(&app.db, &caller.tenant_id, &caller.subject_id, id).await? else {
        return Ok(Standing::Gone);
    };
    if space_access(&app.db, caller, found.knowledge_space_id).await?.is_none() {
        return Ok(Standing::Unreadable);
    }
    Ok(Standing::Readable(found))
}

/// The thread's first turn after `after` (its `created_at` and id; the first of all for
/// none) whose grant holds now.
pub async fn next_turn(app: &App, thread_id: Uuid, after: Option<PageKey>) -> Result<Option<job::Model>, AppError> {
    let rows = threads::turns_page(&app.db, thread_id, after, 1, entity::now_millis()).await?;
    Ok(rows.into_iter().next())
}

/// One page of the caller's threads in a space, most recently updated first.
pub async fn list(
    app: &App,
    caller: &Principal,
    space_id: Uuid,
    page: Page,
) -> Result<Listed<thread::Model>, AppError> {
    if space_access(&app.db, caller, space_id).await?.is_none() {
        return Ok(Listed { rows: Vec::new(), maybe_more: false });
    }
    let rows =
        threads::page(&app.db, &caller.tenant_id, space_id, &caller.subject_id, page.after, page.fetch()).await?;
    Ok(Listed { rows, maybe_more: false })
}

/// Removes a thread the caller just created for a request that then failed, when it holds
/// no turn (it was never shown to anyone, so nothing is audited).
pub async fn discard_unused(app: &App, caller: &Principal, id: Uuid) -> Result<(), AppError> {
    if find(app, caller, id).await?.is_some() && threads::turn_count(&app.db, id).await? == 0 {
        threads::delete(&app.db, id).await?;
    }
    Ok(())
}

/// Where a thread sits in [`list`]'s order.
pub fn thread_key(row: &thread::Model) -> PageKey {
    PageKey { at: row.updated_at, id: row.id }
}

/// One page of the thread's turns the caller may read now, oldest first.
pub async fn turns(app: &App, thread: &thread::Model, page: Page) -> Result<Listed<job::Model>, AppError> {
    let rows = threads::turns_page(&app.db, thread.id, page.after, page.fetch(), entity::now_millis()).await?;
    Ok(Listed { rows, maybe_more: false })
}

/// Where a turn sits in [`turns`]'s order.
pub fn turn_key(task: &job::Model) -> PageKey {
    PageKey { at: task.created_at, id: task.id }
}

/// Changes the caller's thread; omitted fields keep their value.
pub async fn update(
    app: &App,
    caller: &Principal,
    id: Uuid,
    changes: ThreadChanges,
) -> Result<thread::Model, AppError> {
    let title = changes.title.map(title).transpose()?;
    let metadata = changes.metadata.map(|value| limits::json_object("metadata", Some(value))).transpose()?;
    find(app, caller, id).await?.ok_or(AppError::NotFound)?;
    let txn = begin(&app.db).await?;
    let mut row = threads::lock(&txn, id).await?.ok_or(AppError::NotFound)?;
    if let Some(title) = title {
        row.title = title;
    }
    if let Some(metadata) = metadata {
        row.metadata = metadata;
    }
    row.updated_at = entity::now_millis().max(row.updated_at);
    let row = threads::save(&txn, row).await?;
    txn.commit().await.map_err(AppError::from)?;
    Ok(row)
}

/// How many times deletion goes back for turns added while it ran.
const DELETE_ROUNDS: usize = 8;

/// Deletes the caller's thread and its turns, each as a task's deletion removes it (and
/// recorded so), then the thread itself (`research_thread.deleted`). The thread goes only
/// in a transaction that holds its row lock and sees no turn left, so a turn created
/// meanwhile (which takes that lock too) is deleted with it, never left outside.
pub async fn delete(app: &App, actor: Actor<'_>, id: Uuid) -> Result<(), AppError> {
    let found = find(app, actor.principal, id).await?.ok_or(AppError::NotFound)?;
    let mut deleted = 0;
    for _ in 0..DELETE_ROUNDS {
        for task in threads::turn_ids(&app.db, id).await? {
            let entry = audit::Entry {
                tenant_id: &found.tenant_id,
                knowledge_space_id: Some(found.knowledge_space_id),
                action: action::TASK_DELETED,
                target_type: "research_task",
                target_id: Some(task.to_string()),
                details: json!({ "thread_id": id }),
            };
            let record = audit::row(actor, entry, entity::now_millis());
            // A turn already gone (deleted meanwhile) is no failure.
            if crate::lifecycle::delete_task(&app.db, &app.notifier, task, record).await? {
                deleted += 1;
            }
        }
        let txn = begin(&app.db).await?;
        threads::lock(&txn, id).await?.ok_or(AppError::NotFound)?;
        if threads::turn_count(&txn, id).await? > 0 {
            // A turn was added meanwhile: delete it too.
            continue;
        }
        threads::delete(&txn, id).await?;
        let entry = audit::Entry {
            tenant_id: &found.tenant_id,
            knowledge_space_id: Some(found.knowledge_space_id),
            action: action::THREAD_DELETED,
            target_type: "research_thread",
            target_id: Some(id.to_string()),
            details: json!({ "turns": deleted }),
        };
        audit::record(&txn, actor, entry, entity::now_millis()).await?;
        txn.commit().await.map_err(AppError::from)?;
        return Ok(());
    }
    Err(AppError::conflict("turns keep being added to the thread; try deleting it again"))
}
