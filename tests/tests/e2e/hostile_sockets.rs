//! A WebSocket serves nothing HTTP would refuse at that moment: a key revoked or rotated
//! after `connection_init` stops working for queries, mutations and subscriptions alike,
//! and the connection closes with 4403 once its credential dies. Results HTTP returns are
//! delivered whatever their size (or refused for that operation alone), a client frame
//! over the limit closes with 1009, and a clean close is answered with a close frame.
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kfs_tests::server::{TestServer, chrono_now};
use kfs_tests::ws::{Event, Frame, WsClient};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};

use crate::api_support::{Api, CREATE_TASK, PAUSE, string_at};
use crate::live_support::refused_on_socket;
use crate::live_support::{PROGRESS, api_with, take};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_revoked_key_serves_no_query_or_mutation_on_an_open_socket,
        a_rotated_key_serves_no_query_or_mutation_on_an_open_socket,
        a_revoked_key_ends_running_subscriptions_as_unauthenticated_and_closes_4403,
        an_expired_jwt_ends_every_operation_and_closes_4403,
        a_member_removed_from_a_space_keeps_a_working_connection,
        a_result_larger_than_the_old_write_buffer_is_delivered,
        a_result_over_the_response_limit_fails_only_its_operation,
        a_client_frame_over_the_limit_closes_with_1009,
        a_10_mib_frame_is_answered_with_1009_that_nodes_ws_client_reads,
        a_clean_close_is_answered_with_a_close_frame,
    ]
}

const REVOKE_KEY: &str = "mutation($id: UUID!) { revokeApiKey(id: $id) { id } }";
const ROTATE_KEY: &str = "mutation($id: UUID!) { rotateApiKey(id: $id) { secret } }";
const DOCUMENTS: &str = "query($s: UUID!) { knowledgeSpace(id: $s) { documents { id } } }";

/// How long a connection may stay open after its credential died: the key watch polls
/// every 500 ms; this only bounds a server that never notices.
const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// A key's connection that ran a query, then `change` (revoke or rotate) by the owner:
/// the next query and mutation on the same connection answer UNAUTHENTICATED, no task is
/// created, and the server closes with 4403.
async fn key_refused_after(db: TestDb, change: &str) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let (key_id, secret) = api.key("alice", &space).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&secret)).await?;
    client.subscribe("before", DOCUMENTS, json!({ "s": space })).await?;
    let before = client.collect("before").await?;
    ensure!(before[0]["data"]["knowledgeSpace"]["documents"].is_array(), "{before:?}");

    api.data(Some(&api.token("alice")), change, json!({ "id": key_id })).await?;
    // Over HTTP the key is refused at once; the socket must answer the same.
    ensure!(api.code(Some(&secret), DOCUMENTS, json!({ "s": space })).await? == "UNAUTHENTICATED");
    let create = json!({ "input": { "knowledgeSpaceId": space, "query": "after the change" } });
    // The server may refuse each operation and then close, or close before they arrive
    // (it hears of the change at once in this process): either way nothing is served.
    let mut closed = None;
    for (id, query, variables) in [("query", DOCUMENTS, json!({ "s": space })), ("mutation", CREATE_TASK, create)] {
        if client.subscribe(id, query, variables).await.is_err() {
            break;
        }
        match client.next_event().await? {
            Event::Closed(code, _) => {
                closed = code;
                break;
            }
            Event::Error(from, errors) if from == id => {
                let code = errors.pointer("/0/extensions/code").and_then(Value::as_str);
                ensure!(code == Some("UNAUTHENTICATED"), "{id} after the key changed was refused with {errors}");
            }
            other => bail!("{id} after the key changed: expected a refusal, got {other:?}"),
        }
    }
    let closed = match closed {
        Some(code) => code,
        None => closed_with(&mut client).await?,
    };
    ensure!(closed == 4403, "the socket was closed with {closed}, not 4403");
    let tasks = api
        .data(
            Some(&api.token("alice")),
            "query($s: UUID!) { researchTasks(knowledgeSpaceId: $s) { edges { node { query } } } }",
            json!({ "s": space }),
        )
        .await?;
    ensure!(!tasks.to_string().contains("after the change"), "the dead key created a task: {tasks}");
    api.stop().await;
    Ok(())
}

/// Reads until the server's close and returns its code; any operation message first is
/// skipped (operations ending because the credential died), anything else fails.
async fn closed_with(client: &mut WsClient) -> anyhow::Result<u16> {
    let deadline = tokio::time::Instant::now() + CLOSE_DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match client.recv_within(left).await.context("the server kept the connection open")? {
            Frame::Closed(Some(code), _) => return Ok(code),
            Frame::Closed(None, reason) => bail!("the connection ended without a close frame: {reason}"),
            Frame::Message(message)
                if matches!(message["type"].as_str(), Some("next" | "complete" | "error" | "ping")) => {}
            Frame::Message(message) => bail!("unexpected {message}"),
        }
    }
}

async fn a_revoked_key_serves_no_query_or_mutation_on_an_open_socket(db: TestDb) -> anyhow::Result<()> {
    key_refused_after(db, REVOKE_KEY).await
}

async fn a_rotated_key_serves_no_query_or_mutation_on_an_open_socket(db: TestDb) -> anyhow::Result<()> {
    key_refused_after(db, ROTATE_KEY).await
}

async fn a_revoked_key_ends_running_subscriptions_as_unauthenticated_and_closes_4403(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let (key_id, secret) = api.key("alice", &space).await?;
    let task = string_at(&api.task(&secret, &space).await?, "/id")?;
    api.data(Some(&secret), PAUSE, json!({ "id": task })).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&secret)).await?;
    client.subscribe("feed", PROGRESS, json!({ "task": task, "after": 0 })).await?;
    take(&mut client, "feed", 1).await?;

    api.data(Some(&api.token("alice")), REVOKE_KEY, json!({ "id": key_id })).await?;
    match tokio::time::timeout(CLOSE_DEADLINE, client.next_event())
        .await
        .context("the subscription outlived its key")??
    {
        Event::Next(id, payload) if id == "feed" => {
            let code = kfs_tests::ws::error_code(&payload);
            ensure!(code == Some("UNAUTHENTICATED"), "the subscription ended with {payload}");
        }
        other => bail!("expected the subscription's error, got {other:?}"),
    }
    kfs_tests::ensure_eq!(closed_with(&mut client).await?, 4403);
    api.stop().await;
    Ok(())
}

async fn an_expired_jwt_ends_every_operation_and_closes_4403(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let lasting = api.token("alice");
    let task = string_at(&api.task(&lasting, &space).await?, "/id")?;
    api.data(Some(&lasting), PAUSE, json!({ "id": task })).await?;
    let brief = TestServer::token_with("alice", &api.tenant, None, chrono_now() + 2);
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&brief)).await?;
    client.subscribe("one", PROGRESS, json!({ "task": task, "after": 0 })).await?;
    client.subscribe("two", PROGRESS, json!({ "task": task, "after": 0 })).await?;
    let mut ended = Vec::new();
    let code = loop {
        match client.next_event().await? {
            Event::Next(_, payload) if payload.get("errors").is_none() => {}
            Event::Next(id, payload) => {
                ensure!(kfs_tests::ws::error_code(&payload) == Some("UNAUTHENTICATED"), "{id} ended with {payload}");
                ended.push(id);
            }
            Event::Complete(_) => {}
            Event::Closed(code, _) => break code,
            Event::Error(id, errors) => bail!("{id}: {errors}"),
        }
    };
    ended.sort();
    ensure!(ended == ["one", "two"], "operations ended with UNAUTHENTICATED: {ended:?}");
    ensure!(code == Some(4403), "closed with {code:?}");
    api.stop().await;
    Ok(())
}

/// A grant that dies for one task (the member removed) ends that task's subscription, but
/// the caller's own credential (a JWT) still holds: the connection stays open and serves.
async fn a_member_removed_from_a_space_keeps_a_working_connection(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    let bob = api.token("bob");
    let task = string_at(&api.task(&bob, &space).await?, "/id")?;
    api.data(Some(&bob), PAUSE, json!({ "id": task })).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&bob)).await?;
    client.subscribe("feed", PROGRESS, json!({ "task": task, "after": 0 })).await?;
    take(&mut client, "feed", 1).await?;
    let remove = "mutation($s: UUID!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $s, subjectId: \"bob\") }";
    api.data(Some(&api.token("alice")), remove, json!({ "s": space })).await?;
    match tokio::time::timeout(CLOSE_DEADLINE, client.next_event())
        .await
        .context("the subscription outlived the grant")??
    {
        Event::Next(id, payload) if id == "feed" => {
            ensure!(kfs_tests::ws::error_code(&payload) == Some("FORBIDDEN"), "{payload}")
        }
        other => bail!("expected FORBIDDEN, got {other:?}"),
    }
    ensure!(client.next_event().await? == Event::Complete("feed".into()));
    client.subscribe("viewer", "{ viewer { subjectId } }", json!({})).await?;
    let viewer = client.collect("viewer").await?;
    ensure!(viewer[0]["data"]["viewer"]["subjectId"] == "bob", "{viewer:?}");
    api.stop().await;
    Ok(())
}

/// Adds documents of `size` bytes each until their contents add up to `total`.
async fn documents_totalling(api: &Api, space: &str, size: usize, total: usize) -> anyhow::Result<()> {
    let add = "mutation($s: UUID!, $c: String!) { addKnowledgeDocument(input: {knowledgeSpaceId: $s, title: \"big\", content: $c}) { id } }";
    for index in 0..total.div_ceil(size) {
        let content = format!("{index} {}", "word ".repeat(size / 5));
        api.data(Some(&api.token("alice")), add, json!({ "s": space, "c": content })).await?;
    }
    Ok(())
}

const CONTENTS: &str = "query($s: UUID!) { knowledgeSpace(id: $s) { documents(first: 100) { content } } }";

async fn a_result_larger_than_the_old_write_buffer_is_delivered(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    documents_totalling(&api, &space, 150 * 1024, 450 * 1024).await?;
    let (status, over_http) = api.server.post(Some(&api.token("alice")), CONTENTS, json!({ "s": space })).await?;
    ensure!(status == 200 && over_http.get("errors").is_none(), "HTTP answered {status}");
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("alice"))).await?;
    client.subscribe("big", CONTENTS, json!({ "s": space })).await?;
    let results = client.collect("big").await?;
    ensure!(
        results.len() == 1 && results[0] == over_http,
        "the socket delivered something other than what HTTP returned"
    );
    ensure!(results[0].to_string().len() > 400 * 1024, "the result was only {} bytes", results[0].to_string().len());
    api.stop().await;
    Ok(())
}

async fn a_result_over_the_response_limit_fails_only_its_operation(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| settings.max_response_bytes = 200 * 1024).await?;
    let space = api.space("alice").await?;
    documents_totalling(&api, &space, 100 * 1024, 300 * 1024).await?;
    let token = api.token("alice");
    ensure!(
        api.code(Some(&token), CONTENTS, json!({ "s": space })).await? == "TOO_COMPLEX",
        "HTTP served a result over its limit"
    );
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    client.subscribe("big", CONTENTS, json!({ "s": space })).await?;
    ensure!(refused_on_socket(&mut client, "big").await? == "TOO_COMPLEX");
    client.subscribe("small", DOCUMENTS, json!({ "s": space })).await?;
    let small = client.collect("small").await?;
    ensure!(small[0]["data"]["knowledgeSpace"]["documents"].as_array().map(Vec::len) == Some(3), "{small:?}");
    api.stop().await;
    Ok(())
}

async fn a_client_frame_over_the_limit_closes_with_1009(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), None).await?;
    let query = format!("{{ viewer {{ subjectId }} }} # {}", "x".repeat(70 * 1024));
    client.subscribe("huge", &query, json!({})).await?;
    let (code, _) = client.expect_close(Duration::from_secs(10)).await?;
    ensure!(code == 1009, "closed with {code}");
    api.stop().await;
    Ok(())
}

/// A frame far past what the transport reads whole is refused from its header; the
/// server then keeps reading and discarding the rest for a bounded time, so Node's `ws`
/// client reads the 1009 instead of seeing the connection reset (1006), as it did before.
async fn a_10_mib_frame_is_answered_with_1009_that_nodes_ws_client_reads(db: TestDb) -> anyhow::Result<()> {
    let dir = crate::http_contract::node_clients()?;
    let api = Api::start(&db).await?;
    for size in [2 * 1024 * 1024, 10 * 1024 * 1024, 40 * 1024 * 1024] {
        let output = tokio::process::Command::new("node")
            .arg(dir.join("node/ws-oversized-frame.mjs"))
            .args([api.server.ws_url(), size.to_string()])
            .kill_on_drop(true)
            .output()
            .await
            .context("running node (is Node.js installed?)")?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        ensure!(output.status.success(), "{size}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
        let closed: Value = serde_json::from_str(stdout.trim()).with_context(|| format!("node printed {stdout}"))?;
        ensure!(closed["code"] == 1009, "a {size}-byte frame: the client saw {closed}");
    }
    // The server is still there for everyone else.
    let client = WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("alice"))).await?;
    client.close().await?;
    api.stop().await;
    Ok(())
}

async fn a_clean_close_is_answered_with_a_close_frame(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("alice"))).await?;
    client.close_with(1000, "done").await?;
    let (code, _) = client.expect_close(Duration::from_secs(10)).await?;
    ensure!(code == 1000, "the server answered the close with {code}");
    api.stop().await;
    Ok(())
}
