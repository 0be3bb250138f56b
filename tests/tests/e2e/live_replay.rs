//! Replay then live, over a real WebSocket: a subscription reads the journal from the
//! database after `afterSequence`, then follows new rows, and delivers every sequence
//! exactly once and in order, whatever commits while it switches from one to the other,
//! and whether the client stays connected or comes back with the last sequence it saw.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, bail, ensure};
use kfs_tests::ws::{Event, WsClient, sequence_of};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::json;
use tokio::sync::oneshot;

use crate::api_support::{Api, string_at};
use crate::live_support::{Journal, PARTIALS, PROGRESS, assert_exactly, sequences, take};

/// This module's tests, on both databases.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        every_sequence_arrives_once_in_order_while_events_commit_during_a_replay_of_several_batches,
        a_client_that_reconnects_with_its_last_sequence_gets_exactly_the_rest,
        an_already_terminal_task_replays_its_journal_and_completes,
    ]
}

/// Events committed before the subscription starts: two and a half of the server's replay
/// batches (100 rows), so the replay takes several reads and commits can land between them.
const BEFORE: usize = 250;

/// Events committed while the subscription runs, before the terminal one.
const DURING: usize = 150;

async fn every_sequence_arrives_once_in_order_while_events_commit_during_a_replay_of_several_batches(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = string_at(&api.task(&token, &space).await?, "/id")?;
    let mut journal = Journal::of(&api, "alice", &id, 0)?;
    journal.toggles(BEFORE).await?;

    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    client.subscribe("feed", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    // The writer starts when the first replayed event arrives: the replay has begun and has
    // more batches ahead, so its commits race the remaining reads and the switch to live.
    let (replay_started, start_writing) = oneshot::channel::<()>();
    let committed = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn({
        let committed = committed.clone();
        async move {
            start_writing.await.context("the reader never saw the first event")?;
            for _ in 0..DURING {
                journal.toggle().await?;
                committed.fetch_add(1, Ordering::SeqCst);
            }
            journal.cancel().await?;
            anyhow::Ok(journal.written())
        }
    });

    let mut replay_started = Some(replay_started);
    let mut committed_during_replay = None;
    let mut payloads = Vec::new();
    loop {
        match client.next_event().await? {
            Event::Next(_, payload) => {
                let sequence = sequence_of(&payload, "researchTaskProgress")?;
                if let Some(start) = replay_started.take() {
                    let _ = start.send(());
                }
                if sequence == BEFORE as i64 {
                    committed_during_replay = Some(committed.load(Ordering::SeqCst));
                }
                payloads.push(payload);
            }
            Event::Complete(_) => break,
            other => bail!("after {} events: {other:?}", payloads.len()),
        }
    }
    let written = writer.await.context("the writer panicked")??;
    assert_exactly("progress", &sequences(&payloads, "researchTaskProgress")?, 1, written)?;
    let last = payloads.last().and_then(|payload| payload.pointer("/data/researchTaskProgress/eventType"));
    ensure!(last == Some(&json!("CANCELED")), "the feed should end with the cancel, not {last:?}");
    eprintln!(
        "live_replay ({}): {written} events delivered once each; {} of the {DURING} concurrent commits landed before \
         the last pre-existing event ({BEFORE}) reached the client",
        db.backend.name(),
        committed_during_replay.unwrap_or_default()
    );
    api.stop().await;
    Ok(())
}

async fn a_client_that_reconnects_with_its_last_sequence_gets_exactly_the_rest(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = string_at(&api.task(&token, &space).await?, "/id")?;
    let mut journal = Journal::of(&api, "alice", &id, 0)?;
    journal.toggles(3).await?;

    let mut first = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    first.subscribe("feed", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    let replayed = take(&mut first, "feed", 3).await?;
    journal.toggles(2).await?;
    let live = take(&mut first, "feed", 2).await?;
    let seen = sequences(&[replayed, live].concat(), "researchTaskProgress")?;
    assert_exactly("before the drop", &seen, 1, 5)?;
    let last = seen.last().copied().unwrap_or_default();
    // No close frame: the connection just goes away, as it does when a network fails.
    drop(first);

    journal.toggles(2).await?;
    journal.cancel().await?;
    let mut second = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    second.subscribe("feed", PROGRESS, json!({ "task": id, "after": last })).await?;
    let rest = sequences(&second.collect("feed").await?, "researchTaskProgress")?;
    assert_exactly("after reconnecting", &rest, last + 1, journal.written())?;
    api.stop().await;
    Ok(())
}

async fn an_already_terminal_task_replays_its_journal_and_completes(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = string_at(&api.task(&token, &space).await?, "/id")?;
    let mut journal = Journal::of(&api, "alice", &id, 0)?;
    journal.toggle().await?;
    journal.cancel().await?;

    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    client.subscribe("all", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    let all = client.collect("all").await?;
    assert_exactly("the whole journal", &sequences(&all, "researchTaskProgress")?, 1, 2)?;
    ensure!(all[1]["data"]["researchTaskProgress"]["stage"] == "CANCELED", "{all:?}");

    client.subscribe("none-left", PROGRESS, json!({ "task": id, "after": 2 })).await?;
    let none_left = client.collect("none-left").await?;
    ensure!(none_left.is_empty(), "nothing follows the terminal event, yet got {none_left:?}");

    client.subscribe("partials", PARTIALS, json!({ "task": id, "after": 0 })).await?;
    let partials = client.collect("partials").await?;
    ensure!(partials.is_empty(), "the task never ran, yet got partial results {partials:?}");
    client.close().await?;
    api.stop().await;
    Ok(())
}
