//! Input a backend cannot store, ids that would tell what exists, replays that would show
//! what a read no longer does, and commands repeated: each answered as the contract says,
//! the same on both databases.
use anyhow::{Context as _, ensure};
use kfs_tests::server::{TestServer, chrono_now};
use kfs_tests::ws::WsClient;
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::{ADD_MEMBER, Api, CANCEL, CREATE_KEY, CREATE_SPACE, CREATE_TASK, string_at};
use crate::live_support::refused_on_socket;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_nul_in_any_string_input_is_bad_user_input,
        a_nul_in_an_inline_literal_or_over_a_socket_is_bad_user_input,
        a_jwt_whose_claims_hold_a_nul_is_unauthenticated,
        a_key_id_answers_not_found_to_everyone_but_its_owners,
        canceling_a_canceled_task_returns_it_unchanged,
        canceling_a_finished_task_stays_a_conflict,
        replaying_a_key_after_the_member_was_removed_and_re_added_is_a_conflict,
        replaying_a_key_after_the_api_key_was_rotated_is_a_conflict,
    ]
}

/// Every mutation and string a caller can send, with a NUL in one place at a time.
async fn a_nul_in_any_string_input_is_bad_user_input(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let token = api.token("alice");
    let space = api.space("alice").await?;
    let (key_id, _) = api.key("alice", &space).await?;
    let nul = "a\u{0}b";
    let task = |input: Value| {
        let mut base = json!({ "knowledgeSpaceId": space, "query": "q" });
        if let (Value::Object(base), Value::Object(extra)) = (&mut base, input) {
            base.extend(extra);
        }
        json!({ "input": base })
    };
    let document = "mutation($s: UUID!, $t: String!, $c: String!) { addKnowledgeDocument(input: {knowledgeSpaceId: $s, title: $t, content: $c}) { id } }";
    let remove = "mutation($s: UUID!, $x: String!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $s, subjectId: $x) }";
    let read = "query($id: UUID!, $a: String) { researchTasks(knowledgeSpaceId: $id, after: $a) { edges { cursor } } }";
    let cases: Vec<(&str, &str, Value)> = vec![
        ("space name", CREATE_SPACE, json!({ "name": nul })),
        ("document title", document, json!({ "s": space, "t": nul, "c": "c" })),
        ("document content", document, json!({ "s": space, "t": "t", "c": nul })),
        (
            "member subject",
            ADD_MEMBER,
            json!({ "input": { "knowledgeSpaceId": space, "subjectId": nul, "role": "VIEWER" } }),
        ),
        ("removed subject", remove, json!({ "s": space, "x": nul })),
        ("key name", CREATE_KEY, json!({ "input": { "knowledgeSpaceId": space, "name": nul } })),
        ("task query", CREATE_TASK, task(json!({ "query": nul }))),
        ("idempotency key", CREATE_TASK, task(json!({ "idempotencyKey": nul }))),
        ("a limits key", CREATE_TASK, task(json!({ "limits": { nul: 1 } }))),
        ("a limits value", CREATE_TASK, task(json!({ "limits": { "a": [nul] } }))),
        ("a metadata value deep down", CREATE_TASK, task(json!({ "metadata": { "a": { "b": { "c": nul } } } }))),
        ("a cursor", read, json!({ "id": space, "a": nul })),
        ("an unused variable", "query($x: String) { viewer { subjectId } }", json!({ "x": nul })),
    ];
    for (what, query, variables) in cases {
        let (status, body) = api.server.post(Some(&token), query, variables).await?;
        ensure!(status < 500, "{what}: status {status}: {body}");
        let code = kfs_tests::server::first_error_code(&body);
        ensure!(code.as_deref() == Some("BAD_USER_INPUT"), "{what}: {body}");
    }
    // Nothing with a NUL was stored: the space still has its one key, no task, no document.
    let counts = "query($s: UUID!) { knowledgeSpace(id: $s) { apiKeys { id } documents { id } } researchTasks(knowledgeSpaceId: $s) { edges { cursor } } }";
    let data = api.data(Some(&token), counts, json!({ "s": space })).await?;
    ensure!(data["knowledgeSpace"]["apiKeys"] == json!([{ "id": key_id }]), "{data}");
    ensure!(data["knowledgeSpace"]["documents"] == json!([]) && data["researchTasks"]["edges"] == json!([]), "{data}");
    api.stop().await;
    Ok(())
}

async fn a_nul_in_an_inline_literal_or_over_a_socket_is_bad_user_input(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let token = api.token("alice");
    let literal = r#"mutation { createKnowledgeSpace(input: { name: "x\u0000y" }) { id } }"#;
    ensure!(api.code(Some(&token), literal, json!({})).await? == "BAD_USER_INPUT");
    let block = "mutation { createKnowledgeSpace(input: { name: \"\"\"x\u{0}y\"\"\" }) { id } }";
    ensure!(api.code(Some(&token), block, json!({})).await? == "BAD_USER_INPUT");
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    client.subscribe("literal", literal, json!({})).await?;
    ensure!(refused_on_socket(&mut client, "literal").await? == "BAD_USER_INPUT");
    client.subscribe("variable", CREATE_SPACE, json!({ "name": "x\u{0}" })).await?;
    ensure!(refused_on_socket(&mut client, "variable").await? == "BAD_USER_INPUT");
    let spaces = api.data(Some(&token), "{ knowledgeSpaces { edges { cursor } } }", json!({})).await?;
    ensure!(spaces["knowledgeSpaces"]["edges"] == json!([]), "a space was created: {spaces}");
    api.stop().await;
    Ok(())
}

async fn a_jwt_whose_claims_hold_a_nul_is_unauthenticated(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let exp = chrono_now() + 3600;
    for (subject, tenant) in [("al\u{0}ice", api.tenant.clone()), ("alice", format!("{}\u{0}", api.tenant))] {
        let token = TestServer::token_with(subject, &tenant, None, exp);
        ensure!(api.code(Some(&token), "{ viewer { subjectId } }", json!({})).await? == "UNAUTHENTICATED");
    }
    let token = TestServer::token_with("alice", &api.tenant, Some("mcp\u{0}"), exp);
    ensure!(api.code(Some(&token), "{ viewer { subjectId } }", json!({})).await? == "UNAUTHENTICATED");
    api.stop().await;
    Ok(())
}

/// Only owners see a space's keys, so revoking or rotating by id answers exactly as for a
/// random id to editors, viewers, other spaces' owners and other tenants; owners succeed.
async fn a_key_id_answers_not_found_to_everyone_but_its_owners(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "ed", "EDITOR").await?;
    api.member("alice", &space, "vi", "VIEWER").await?;
    api.space("mallory").await?;
    let (key_id, secret) = api.key("alice", &space).await?;
    let random = Uuid::new_v4().to_string();
    let other_tenant = TestServer::token("alice", "another-tenant");
    let revoke = "mutation($id: UUID!) { revokeApiKey(id: $id) { id } }";
    let rotate = "mutation($id: UUID!) { rotateApiKey(id: $id) { secret } }";
    for mutation in [revoke, rotate] {
        for bearer in [api.token("ed"), api.token("vi"), api.token("mallory"), other_tenant.clone(), secret.clone()] {
            for id in [&key_id, &random] {
                let code = api.code(Some(&bearer), mutation, json!({ "id": id })).await?;
                ensure!(code == "NOT_FOUND", "{mutation} of {id} answered {code}");
            }
        }
    }
    // Fields of a space the caller can see stay FORBIDDEN for the wrong role.
    let keys = "query($s: UUID!) { knowledgeSpace(id: $s) { apiKeys { id } } }";
    ensure!(api.code(Some(&api.token("ed")), keys, json!({ "s": space })).await? == "FORBIDDEN");
    let rotated = api.data(Some(&api.token("alice")), rotate, json!({ "id": key_id })).await?;
    ensure!(rotated["rotateApiKey"]["secret"].as_str().is_some_and(|s| s != secret), "{rotated}");
    api.stop().await;
    Ok(())
}

/// The number of progress events of a task.
async fn event_count(api: &Api, token: &str, id: &str) -> anyhow::Result<usize> {
    let events = "query($id: UUID!) { researchTask(id: $id) { progressEvents { sequence } } }";
    let data = api.data(Some(token), events, json!({ "id": id })).await?;
    data["researchTask"]["progressEvents"].as_array().map(Vec::len).context("no events")
}

async fn canceling_a_canceled_task_returns_it_unchanged(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = string_at(&api.task(&token, &space).await?, "/id")?;
    let first = api.data(Some(&token), CANCEL, json!({ "id": id, "v": 1 })).await?;
    ensure!(first["cancelResearchTask"]["stage"] == "CANCELED", "{first}");
    let events = event_count(&api, &token, &id).await?;
    for version in [json!(null), json!(1), first["cancelResearchTask"]["rowVersion"].clone(), json!(999)] {
        let again = api.data(Some(&token), CANCEL, json!({ "id": id, "v": version })).await?;
        ensure!(
            again == first,
            "canceling again (expectedRowVersion {version}) answered {again}, the first cancel {first}"
        );
    }
    ensure!(event_count(&api, &token, &id).await? == events, "canceling again wrote an event");
    api.stop().await;
    Ok(())
}

async fn canceling_a_finished_task_stays_a_conflict(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.embedded_worker = true).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = string_at(&api.task(&token, &space).await?, "/id")?;
    kfs_tests::process::wait_until(std::time::Duration::from_secs(60), "the task to complete", async || {
        let data = api.data(Some(&token), crate::api_support::READ_TASK, json!({ "id": id })).await?;
        Ok(data["researchTask"]["stage"] == "COMPLETED")
    })
    .await?;
    let body = api.call(Some(&token), CANCEL, json!({ "id": id })).await?;
    ensure!(kfs_tests::server::first_error_code(&body).as_deref() == Some("CONFLICT"), "{body}");
    ensure!(body.pointer("/errors/0/extensions/currentStage") == Some(&json!("COMPLETED")), "{body}");
    api.stop().await;
    Ok(())
}

const KEYED_TASK: &str = "mutation($s: UUID!) { createResearchTask(input: {knowledgeSpaceId: $s, query: \"q\", idempotencyKey: \"k1\"}) { id answerTrace { id } } }";

/// The caller's tasks in the space, by id, as the owner of the space would list its own.
async fn task_ids(api: &Api, bearer: &str, space: &str) -> anyhow::Result<Vec<String>> {
    let list = "query($s: UUID!) { researchTasks(knowledgeSpaceId: $s) { edges { node { id } } } }";
    let data = api.data(Some(bearer), list, json!({ "s": space })).await?;
    Ok(data["researchTasks"]["edges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|edge| edge["node"]["id"].as_str().map(str::to_owned))
        .collect())
}

async fn replaying_a_key_after_the_member_was_removed_and_re_added_is_a_conflict(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    let bob = api.token("bob");
    let created = api.data(Some(&bob), KEYED_TASK, json!({ "s": space })).await?;
    let replayed = api.data(Some(&bob), KEYED_TASK, json!({ "s": space })).await?;
    ensure!(replayed == created, "a replay under a live grant returns the same task");

    let remove = "mutation($s: UUID!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $s, subjectId: \"bob\") }";
    api.data(Some(&api.token("alice")), remove, json!({ "s": space })).await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    let read = api
        .data(Some(&bob), crate::api_support::READ_TASK, json!({ "id": created["createResearchTask"]["id"] }))
        .await?;
    ensure!(read["researchTask"].is_null(), "the old task is readable again: {read}");
    let body = api.call(Some(&bob), KEYED_TASK, json!({ "s": space })).await?;
    ensure!(kfs_tests::server::first_error_code(&body).as_deref() == Some("CONFLICT"), "the replay answered {body}");
    ensure!(
        body["data"].is_null()
            && !body.to_string().contains(created["createResearchTask"]["id"].as_str().unwrap_or("?")),
        "{body}"
    );
    ensure!(task_ids(&api, &bob, &space).await?.is_empty(), "the refused replay created a task");
    api.stop().await;
    Ok(())
}

async fn replaying_a_key_after_the_api_key_was_rotated_is_a_conflict(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let (key_id, secret) = api.key("alice", &space).await?;
    let created = api.data(Some(&secret), KEYED_TASK, json!({ "s": space })).await?;
    let rotate = "mutation($id: UUID!) { rotateApiKey(id: $id) { secret } }";
    let rotated = api.data(Some(&api.token("alice")), rotate, json!({ "id": key_id })).await?;
    let fresh = string_at(&rotated, "/rotateApiKey/secret")?;
    let body = api.call(Some(&fresh), KEYED_TASK, json!({ "s": space })).await?;
    ensure!(kfs_tests::server::first_error_code(&body).as_deref() == Some("CONFLICT"), "the replay answered {body}");
    ensure!(!body.to_string().contains(created["createResearchTask"]["id"].as_str().unwrap_or("?")), "{body}");
    ensure!(task_ids(&api, &fresh, &space).await?.is_empty(), "the refused replay created a task");
    // A new key for the same work goes through.
    let other = api.data(Some(&fresh), &KEYED_TASK.replace("k1", "k2"), json!({ "s": space })).await?;
    ensure!(other["createResearchTask"]["id"] != created["createResearchTask"]["id"], "{other}");
    api.stop().await;
    Ok(())
}
