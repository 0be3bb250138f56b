//! The WebSocket protocol, seen from a real client: every close code of
//! graphql-transport-ws the server uses, ping and pong both ways, the per-connection and
//! per-process limits, and the legacy `graphql-ws` subprotocol.
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use kfs_tests::server::TestServer;
use kfs_tests::ws::{Event, Frame, LEGACY_GRAPHQL_WS, TRANSPORT_WS, WsClient, sequence_of};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};

use crate::api_support::{Api, string_at};
use crate::live_support::{Journal, PROGRESS, api_with, take};

/// This module's tests, on both databases.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        messages_the_server_cannot_understand_close_with_4400,
        subscribing_before_the_connection_is_acknowledged_closes_with_4401,
        a_connection_init_with_a_credential_that_does_not_hold_closes_with_4403,
        no_connection_init_within_the_init_timeout_closes_with_4408,
        a_subscribe_reusing_the_id_of_a_running_operation_closes_with_4409,
        a_second_connection_init_closes_with_4429,
        a_client_ping_is_answered_with_a_pong_carrying_its_payload,
        the_server_pings_an_idle_connection_at_its_interval,
        an_operation_past_the_per_connection_limit_gets_an_error_for_its_id_alone,
        connections_past_the_process_limit_are_refused_until_one_closes,
        the_legacy_graphql_ws_protocol_acknowledges_starts_streams_data_and_completes,
        a_client_that_stops_reading_is_closed_with_1013_once_it_drains_its_backlog,
    ]
}

/// How long a test waits for a close the server sends at once.
const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// A space and a queued task of alice's; returns the task id and alice's token.
async fn live_task(api: &Api) -> anyhow::Result<(String, String)> {
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = string_at(&api.task(&token, &space).await?, "/id")?;
    Ok((id, token))
}

async fn messages_the_server_cannot_understand_close_with_4400(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let token = api.token("alice");
    let subscribe_without_id =
        json!({ "type": "subscribe", "payload": { "query": "subscription { __typename }" } }).to_string();
    let unknown_type = json!({ "type": "start", "id": "1", "payload": { "query": "{ __typename }" } }).to_string();
    let variables_not_a_map =
        json!({ "type": "subscribe", "id": "1", "payload": { "query": "{ __typename }", "variables": [1] } })
            .to_string();
    for text in ["this is not JSON", "{\"id\": \"1\"}", &subscribe_without_id, &unknown_type, &variables_not_a_map] {
        let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
        client.send_text(text).await?;
        let (code, reason) = client.expect_close(CLOSE_DEADLINE).await?;
        ensure!(code == 4400, "{text} closed with {code} {reason:?}, not 4400");
    }
    api.stop().await;
    Ok(())
}

async fn subscribing_before_the_connection_is_acknowledged_closes_with_4401(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let (id, _) = live_task(&api).await?;
    let mut client = WsClient::connect(&api.server.ws_url(), TRANSPORT_WS).await?;
    client.subscribe("1", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    let (code, reason) = client.expect_close(CLOSE_DEADLINE).await?;
    ensure!((code, reason.as_str()) == (4401, "Unauthorized"), "closed with {code} {reason:?}");
    api.stop().await;
    Ok(())
}

async fn a_connection_init_with_a_credential_that_does_not_hold_closes_with_4403(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let expired = TestServer::token_with("alice", &api.tenant, None, kfs_tests::server::chrono_now() - 10);
    let foreign = TestServer::token("alice", &api.tenant).replace('.', ".x");
    for credential in ["not-a-token", "kfs_00000000000000000000000000000000_nope", expired.as_str(), foreign.as_str()] {
        let mut client = WsClient::connect(&api.server.ws_url(), TRANSPORT_WS).await?;
        let payload = json!({ "Authorization": format!("Bearer {credential}") });
        client.send(json!({ "type": "connection_init", "payload": payload })).await?;
        let (code, reason) = client.expect_close(CLOSE_DEADLINE).await?;
        ensure!((code, reason.as_str()) == (4403, "Forbidden"), "{credential} closed with {code} {reason:?}");
    }
    api.stop().await;
    Ok(())
}

async fn no_connection_init_within_the_init_timeout_closes_with_4408(db: TestDb) -> anyhow::Result<()> {
    const TIMEOUT_MS: u64 = 300;
    let api = api_with(&db, |settings| settings.ws_init_timeout_ms = TIMEOUT_MS).await?;
    let opened = Instant::now();
    let mut silent = WsClient::connect(&api.server.ws_url(), TRANSPORT_WS).await?;
    let (code, reason) = silent.expect_close(CLOSE_DEADLINE).await?;
    let waited = opened.elapsed();
    ensure!(code == 4408, "closed with {code} {reason:?}");
    ensure!(waited >= Duration::from_millis(TIMEOUT_MS), "closed after {waited:?}, before the {TIMEOUT_MS} ms timeout");
    eprintln!("live_protocol ({}): 4408 after {waited:?} (timeout {TIMEOUT_MS} ms)", db.backend.name());

    // A client that does initialise in time outlives the timeout.
    let mut prompt = WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("alice"))).await?;
    match prompt.recv_within(Duration::from_millis(3 * TIMEOUT_MS)).await {
        Err(_) => {}
        Ok(frame) => bail!("an initialised connection got {frame:?} after the init timeout"),
    }
    api.stop().await;
    Ok(())
}

async fn a_subscribe_reusing_the_id_of_a_running_operation_closes_with_4409(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let (id, token) = live_task(&api).await?;
    let mut journal = Journal::of(&api, "alice", &id, 0)?;
    journal.toggle().await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    client.subscribe("same", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    // The first one demonstrably runs (it delivered an event) before the second arrives.
    take(&mut client, "same", 1).await?;
    client.subscribe("same", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    let (code, reason) = client.expect_close(CLOSE_DEADLINE).await?;
    ensure!((code, reason.as_str()) == (4409, "Subscriber for same already exists"), "closed with {code} {reason:?}");
    api.stop().await;
    Ok(())
}

async fn a_second_connection_init_closes_with_4429(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let token = api.token("alice");
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    let payload = json!({ "Authorization": format!("Bearer {token}") });
    client.send(json!({ "type": "connection_init", "payload": payload })).await?;
    let (code, reason) = client.expect_close(CLOSE_DEADLINE).await?;
    ensure!((code, reason.as_str()) == (4429, "Too many initialisation requests"), "closed with {code} {reason:?}");
    api.stop().await;
    Ok(())
}

async fn a_client_ping_is_answered_with_a_pong_carrying_its_payload(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("alice"))).await?;
    client.send(json!({ "type": "ping", "payload": { "sent": 42 } })).await?;
    let pong = client.recv().await?;
    ensure!(pong == Frame::Message(json!({ "type": "pong", "payload": { "sent": 42 } })), "{pong:?}");
    client.send(json!({ "type": "ping" })).await?;
    let bare = client.recv().await?;
    ensure!(bare == Frame::Message(json!({ "type": "pong" })), "{bare:?}");
    client.close().await?;
    api.stop().await;
    Ok(())
}

async fn the_server_pings_an_idle_connection_at_its_interval(db: TestDb) -> anyhow::Result<()> {
    const INTERVAL_MS: u64 = 150;
    let api = api_with(&db, |settings| settings.ws_ping_interval_ms = INTERVAL_MS).await?;
    // Measured from before the connection exists: the server's interval starts when it
    // accepts the connection, a little after this.
    let opened = Instant::now();
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("alice"))).await?;
    for ping in 1..=3 {
        let frame = client.recv().await?;
        ensure!(frame == Frame::Message(json!({ "type": "ping" })), "expected keep-alive ping {ping}, got {frame:?}");
        client.send(json!({ "type": "pong" })).await?;
    }
    let elapsed = opened.elapsed();
    ensure!(
        elapsed >= Duration::from_millis(3 * INTERVAL_MS),
        "three pings within {elapsed:?}: faster than the interval"
    );
    eprintln!(
        "live_protocol ({}): three keep-alive pings in {elapsed:?} (interval {INTERVAL_MS} ms)",
        db.backend.name()
    );
    client.close().await?;
    api.stop().await;
    Ok(())
}

async fn an_operation_past_the_per_connection_limit_gets_an_error_for_its_id_alone(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| settings.ws_max_subscriptions = 2).await?;
    let (id, token) = live_task(&api).await?;
    let mut journal = Journal::of(&api, "alice", &id, 0)?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    for operation in ["a", "b", "c"] {
        client.subscribe(operation, PROGRESS, json!({ "task": id, "after": 0 })).await?;
    }
    match client.next_event().await? {
        Event::Error(operation, errors) if operation == "c" => {
            let code = errors.pointer("/0/extensions/code").and_then(Value::as_str);
            ensure!(code == Some("BAD_USER_INPUT"), "the refusal should say BAD_USER_INPUT: {errors}");
        }
        other => bail!("expected an error for the third operation, got {other:?}"),
    }
    // The connection and the two operations within the limit carry on.
    journal.toggle().await?;
    journal.cancel().await?;
    let delivered = client.collect_all(&["a", "b"]).await?;
    for (operation, payloads) in &delivered {
        let sequences: Vec<i64> =
            payloads.iter().map(|payload| sequence_of(payload, "researchTaskProgress")).collect::<Result<_, _>>()?;
        ensure!(sequences == [1, 2], "operation {operation} got {sequences:?}");
    }
    // A finished operation frees its place.
    client.subscribe("c", PROGRESS, json!({ "task": id, "after": 1 })).await?;
    ensure!(client.collect("c").await?.len() == 1, "a third operation after two completed should run");
    client.close().await?;
    api.stop().await;
    Ok(())
}

async fn connections_past_the_process_limit_are_refused_until_one_closes(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| settings.ws_max_connections = 1).await?;
    let token = api.token("alice");
    let first = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    let refused = WsClient::connect(&api.server.ws_url(), TRANSPORT_WS).await.err().map(|error| format!("{error:#}"));
    ensure!(
        refused.as_deref().is_some_and(|error| error.contains("503")),
        "a second connection should get 503, got {refused:?}"
    );
    first.close().await?;
    // The permit comes back when the server has finished with the closed connection.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await {
            Ok(again) => {
                again.close().await?;
                break;
            }
            Err(error) if Instant::now() < deadline => {
                ensure!(format!("{error:#}").contains("503"), "unexpected failure: {error:#}");
                // Polling the endpoint is the only way to see the permit return.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => bail!("the closed connection's place never came back: {error:#}"),
        }
    }
    api.stop().await;
    Ok(())
}

async fn the_legacy_graphql_ws_protocol_acknowledges_starts_streams_data_and_completes(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let (id, token) = live_task(&api).await?;
    let mut journal = Journal::of(&api, "alice", &id, 0)?;
    journal.toggle().await?;
    let mut client = WsClient::connect(&api.server.ws_url(), LEGACY_GRAPHQL_WS).await?;
    client
        .send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } }))
        .await?;
    let ack = client.recv().await?;
    ensure!(ack == Frame::Message(json!({ "type": "connection_ack" })), "{ack:?}");
    let payload = json!({ "query": PROGRESS, "variables": { "task": id, "after": 0 } });
    client.send(json!({ "type": "start", "id": "legacy", "payload": payload })).await?;
    let replayed = client.recv().await?;
    journal.cancel().await?;
    let live = client.recv().await?;
    for (frame, sequence, event) in [(&replayed, 1, "PAUSED"), (&live, 2, "CANCELED")] {
        let expected = json!({ "sequence": sequence, "eventType": event, "stage": event });
        let wanted = Frame::Message(
            json!({ "type": "data", "id": "legacy", "payload": { "data": { "researchTaskProgress": expected } } }),
        );
        ensure!(*frame == wanted, "expected {wanted:?}, got {frame:?}");
    }
    let complete = client.recv().await?;
    ensure!(complete == Frame::Message(json!({ "type": "complete", "id": "legacy" })), "{complete:?}");
    client.send(json!({ "type": "connection_terminate" })).await?;
    let ended = client.recv().await?;
    ensure!(matches!(ended, Frame::Closed(..)), "connection_terminate should end the connection, got {ended:?}");
    api.stop().await;
    Ok(())
}

/// A client that stops reading makes the server's writes block; after the send timeout
/// the server gives up on it, and the close frame (1013) waits behind the backlog, so the
/// client learns why once it reads again. Nothing is buffered for it meanwhile: the
/// server pulls results only as fast as the socket takes them.
async fn a_client_that_stops_reading_is_closed_with_1013_once_it_drains_its_backlog(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| settings.ws_send_timeout_ms = 300).await?;
    let (task_id, token) = live_task(&api).await?;
    // Far more than the kernel buffers between the two ends hold: ~8 MB of evidence.
    let task = uuid::Uuid::parse_str(&task_id)?;
    let filler = "x".repeat(100_000);
    let job =
        worker::store::tasks::find(&db.db, task).await?.ok_or_else(|| anyhow::anyhow!("task {task} not found"))?;
    for n in 0..80 {
        kfs_tests::fixtures::append_partial(&db, &job, &format!("bulk:{n}"), json!({ "filler": filler })).await?;
    }

    let mut client = WsClient::connect_with_small_receive_buffer(&api.server.ws_url()).await?;
    client.init(Some(&token)).await?;
    let query = "subscription($id: UUID!) { researchTaskPartialResults(taskId: $id) { sequence evidenceBundle } }";
    client.subscribe("bulk", query, json!({ "id": task_id })).await?;
    // Stop reading for well past the send timeout, then drain everything there is.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let started = Instant::now();
    let mut delivered = 0;
    // Each frame is waited for up to a minute: on a loaded machine (CI beside a model
    // build) the server's first sends and its close after the send timeout can take
    // seconds; only a real hang waits that long.
    let (code, reason) = loop {
        match client.recv_within(Duration::from_secs(60)).await? {
            Frame::Message(message) if message["type"] == "next" => delivered += 1,
            // The keep-alive may fall due while a loaded machine drains (the protocol
            // allows a ping at any time); only a result or the close counts here.
            Frame::Message(message) if message["type"] == "ping" => {}
            Frame::Message(other) => bail!("unexpected message {other}"),
            Frame::Closed(code, reason) => break (code, reason),
        }
    };
    println!(
        "live_protocol ({}): slow client closed with {code:?} after {delivered} results, {:?} of draining",
        db.backend.name(),
        started.elapsed()
    );
    ensure!(code == Some(1013), "closed with {code:?} {reason:?}, not 1013");
    ensure!(delivered < 80, "the server delivered all {delivered} results, so the client was never too slow");
    api.stop().await;
    Ok(())
}
