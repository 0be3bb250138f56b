//! A live subscription ends, with an error, as soon as the caller's grant stops holding:
//! its API key revoked or rotated, its membership removed, its JWT expired. The server
//! re-checks the grant every 500 ms, so each test allows a generous 5 s and prints the
//! latency it measured.
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kfs_tests::server::{TestServer, chrono_now};
use kfs_tests::ws::{Event, WsClient, error_code};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};

use crate::api_support::{Api, PAUSE, string_at};
use crate::live_support::{PROGRESS, refused_on_socket, take};

/// This module's tests, on both databases.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        revoking_the_api_key_ends_its_live_subscription_with_an_error,
        rotating_the_api_key_ends_its_live_subscription_with_an_error,
        removing_the_member_ends_their_live_subscription_with_an_error,
        a_jwt_expiring_while_subscribed_ends_the_subscription_as_unauthenticated,
    ]
}

/// The longest a revoked subscription may keep running: far above the 500 ms re-check, so
/// only a subscription that never notices fails.
const END_DEADLINE: Duration = Duration::from_secs(5);

const REVOKE_KEY: &str = "mutation($id: UUID!) { revokeApiKey(id: $id) { id revokedAt } }";
const ROTATE_KEY: &str = "mutation($id: UUID!) { rotateApiKey(id: $id) { secret apiKey { revision } } }";
const REMOVE_MEMBER: &str = "mutation($space: UUID!, $subject: String!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $space, subjectId: $subject) }";

/// A connection of `bearer` following its own task `id`, which holds one event; returns once
/// that event arrived, so the subscription demonstrably runs.
async fn following(api: &Api, bearer: &str, id: &str) -> anyhow::Result<WsClient> {
    api.data(Some(bearer), PAUSE, json!({ "id": id })).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(bearer)).await?;
    client.subscribe("feed", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    take(&mut client, "feed", 1).await?;
    Ok(client)
}

/// Waits for the subscription to end with an error and then `complete`; returns the error
/// code. Anything else first (another event, a silent complete, the connection closing)
/// fails.
async fn ended_with_error(client: &mut WsClient) -> anyhow::Result<String> {
    let code = tokio::time::timeout(END_DEADLINE, async {
        match client.next_event().await? {
            Event::Next(id, payload) if id == "feed" => {
                error_code(&payload).map(str::to_owned).with_context(|| format!("expected an error, got {payload}"))
            }
            other => bail!("expected the subscription's error, got {other:?}"),
        }
    })
    .await
    .with_context(|| {
        format!("the subscription was still running {END_DEADLINE:?} after the grant stopped holding")
    })??;
    match client.next_event().await? {
        Event::Complete(id) if id == "feed" => Ok(code),
        other => bail!("expected complete after the error, got {other:?}"),
    }
}

/// Subscribes to `task` as `id` and returns the code the server refused it with.
async fn refusal(client: &mut WsClient, id: &str, task: &str) -> anyhow::Result<String> {
    client.subscribe(id, PROGRESS, json!({ "task": task, "after": 0 })).await?;
    refused_on_socket(client, id).await
}

/// Subscribes again once the connection's credential died: the server refuses with
/// UNAUTHENTICATED (if the subscribe reaches it first) and closes; returns the close code.
async fn closed_after_refusals(client: &mut WsClient, task: &str) -> anyhow::Result<u16> {
    let _ = client.subscribe("again", PROGRESS, json!({ "task": task, "after": 0 })).await;
    loop {
        match client.next_event().await? {
            Event::Closed(Some(code), _) => return Ok(code),
            Event::Error(id, errors) if id == "again" => {
                let code = errors.pointer("/0/extensions/code").and_then(Value::as_str);
                ensure!(code == Some("UNAUTHENTICATED"), "subscribing under a dead credential answered {errors}");
            }
            other => bail!("expected the connection to close, got {other:?}"),
        }
    }
}

/// Ends a key's subscription with `mutation` (on the key's id) run by the space's owner;
/// checks the error, prints the latency, and checks the same connection cannot subscribe
/// again.
async fn key_subscription_ended_by(db: TestDb, mutation: &str, what: &str) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let (key_id, secret) = api.key("alice", &space).await?;
    let id = string_at(&api.task(&secret, &space).await?, "/id")?;
    let mut client = following(&api, &secret, &id).await?;

    api.data(Some(&api.token("alice")), mutation, json!({ "id": key_id })).await?;
    let committed = Instant::now();
    let code = ended_with_error(&mut client).await?;
    let latency = committed.elapsed();
    ensure!(code == "FORBIDDEN" || code == "UNAUTHENTICATED", "{what}: the subscription ended with {code}");
    eprintln!(
        "live_revocation ({}): {what} ended the key's subscription ({code}) {latency:?} after the commit",
        db.backend.name()
    );
    // The connection's own credential died with the key: the server closes it (4403).
    ensure!(closed_after_refusals(&mut client, &id).await? == 4403, "{what}: the connection was not closed with 4403");
    api.stop().await;
    Ok(())
}

async fn revoking_the_api_key_ends_its_live_subscription_with_an_error(db: TestDb) -> anyhow::Result<()> {
    key_subscription_ended_by(db, REVOKE_KEY, "revoking the key").await
}

async fn rotating_the_api_key_ends_its_live_subscription_with_an_error(db: TestDb) -> anyhow::Result<()> {
    key_subscription_ended_by(db, ROTATE_KEY, "rotating the key").await
}

async fn removing_the_member_ends_their_live_subscription_with_an_error(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    let bob = api.token("bob");
    let id = string_at(&api.task(&bob, &space).await?, "/id")?;
    let mut client = following(&api, &bob, &id).await?;

    api.data(Some(&api.token("alice")), REMOVE_MEMBER, json!({ "space": space, "subject": "bob" })).await?;
    let committed = Instant::now();
    let code = ended_with_error(&mut client).await?;
    let latency = committed.elapsed();
    ensure!(code == "FORBIDDEN" || code == "UNAUTHENTICATED", "the subscription ended with {code}");
    eprintln!(
        "live_revocation ({}): removing the member ended their subscription ({code}) {latency:?} after the commit",
        db.backend.name()
    );
    let again = refusal(&mut client, "again", &id).await?;
    ensure!(again == "NOT_FOUND", "a removed member subscribing again answered {again}");
    api.stop().await;
    Ok(())
}

async fn a_jwt_expiring_while_subscribed_ends_the_subscription_as_unauthenticated(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let lasting = api.token("alice");
    let id = string_at(&api.task(&lasting, &space).await?, "/id")?;
    // Two seconds ahead (whole seconds, so between one and two from now): long enough to
    // connect and receive an event, short enough to wait for.
    let exp = chrono_now() + 2;
    let brief = TestServer::token_with("alice", &api.tenant, None, exp);
    api.data(Some(&lasting), PAUSE, json!({ "id": id })).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&brief)).await?;
    client.subscribe("feed", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    take(&mut client, "feed", 1).await?;

    let code = ended_with_error(&mut client).await?;
    let after_expiry_ms = entity::now_millis() - exp * 1000;
    ensure!(code == "UNAUTHENTICATED", "an expired token's subscription ended with {code}");
    ensure!(after_expiry_ms >= 0, "the subscription ended {}ms before the token expired", -after_expiry_ms);
    eprintln!(
        "live_revocation ({}): the JWT's expiry ended its subscription {after_expiry_ms} ms after exp",
        db.backend.name()
    );
    // Nothing more is served under the expired token: the server closes the connection.
    ensure!(closed_after_refusals(&mut client, &id).await? == 4403, "the connection outlived its token");
    api.stop().await;
    Ok(())
}
