//! The audit log through the API: what owners do to keys, members and webhooks is
//! recorded with who, how and from which request (never a secret); owners read their
//! space's log and nobody else's, operators read everyone's; the log is append-only and
//! kept as long as the retention settings say.
use anyhow::ensure;
use entity::audit_event;
use kfs_tests::server::TestServer;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use sea_orm::{ActiveValue::Set, ConnectionTrait, EntityTrait, PaginatorTrait, Statement};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::{Api, string_at};
use crate::live_support::api_with;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        security_actions_are_recorded_with_actor_and_request_and_read_only_by_owners_and_operators,
        the_audit_log_is_append_only_and_follows_retention,
    ]
}

const LOG: &str = "query($space: UUID, $tenant: String, $first: Int, $after: String) { auditEvents(knowledgeSpaceId: $space, tenantId: $tenant, first: $first, after: $after) { edges { cursor node { action tenantId knowledgeSpaceId actorSubjectId actorChannel actorApiKeyId requestId targetType targetId details createdAt } } pageInfo { hasNextPage endCursor } } }";

fn actions(log: &Value) -> Vec<String> {
    log["auditEvents"]["edges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|edge| edge["node"]["action"].as_str().map(str::to_owned))
        .collect()
}

async fn security_actions_are_recorded_with_actor_and_request_and_read_only_by_owners_and_operators(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| {
        settings.operator_subjects = vec!["ops-admin".to_owned()];
        settings.worker.webhooks.allow_private = true;
    })
    .await?;
    let alice = api.token("alice");
    let space = api.space("alice").await?;
    let (key_id, secret) = api.key("alice", &space).await?;
    // One request with the caller's own request id, which the log keeps and the
    // response echoes.
    let rotate = "mutation($id: UUID!) { rotateApiKey(id: $id) { secret } }";
    let response = api
        .server
        .http
        .post(api.server.graphql_url())
        .bearer_auth(&alice)
        .header("x-request-id", "client-req-42")
        .json(&json!({ "query": rotate, "variables": { "id": key_id } }))
        .send()
        .await?;
    ensure_eq!(response.headers().get("x-request-id").and_then(|value| value.to_str().ok()), Some("client-req-42"));
    let rotated: Value = response.json().await?;
    let new_secret = string_at(&rotated, "/data/rotateApiKey/secret")?;
    api.data(Some(&alice), "mutation($id: UUID!) { revokeApiKey(id: $id) { id } }", json!({ "id": key_id })).await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    api.member("alice", &space, "bob", "EDITOR").await?;
    api.data(
        Some(&alice),
        "mutation($space: UUID!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $space, subjectId: \"bob\") }",
        json!({ "space": space }),
    )
    .await?;

    let log = api.data(Some(&alice), LOG, json!({ "space": space, "first": 50 })).await?;
    ensure_eq!(
        actions(&log),
        [
            "member.removed",
            "member.changed",
            "member.added",
            "api_key.revoked",
            "api_key.rotated",
            "api_key.created",
            "knowledge_space.created"
        ],
        "newest first"
    );
    let edges = log["auditEvents"]["edges"].as_array().cloned().unwrap_or_default();
    let node = |action: &str| edges.iter().map(|edge| &edge["node"]).find(|node| node["action"] == action).cloned();
    let rotation = node("api_key.rotated").unwrap_or_default();
    ensure_eq!(rotation["requestId"], json!("client-req-42"));
    ensure_eq!(rotation["actorSubjectId"], json!("alice"));
    ensure_eq!(rotation["actorChannel"], json!("INTERACTIVE"));
    ensure_eq!(rotation["targetId"], json!(key_id));
    ensure_eq!(rotation["details"]["revision"], json!(2));
    let change = node("member.changed").unwrap_or_default();
    ensure_eq!(
        (change["targetId"].clone(), change["details"]["from"].clone(), change["details"]["to"].clone()),
        (json!("bob"), json!("viewer"), json!("editor"))
    );
    ensure!(
        edges.iter().all(|edge| edge["node"]["requestId"].as_str().is_some_and(|id| !id.is_empty())),
        "every entry names its request"
    );
    let text = log.to_string();
    for secret in [&secret, &new_secret] {
        let tail = secret.rsplit('_').next().unwrap_or(secret);
        ensure!(!text.contains(tail), "a key secret is in the audit log");
    }

    // A service client's action names its key.
    let (_, key) = api.key("alice", &space).await?;
    let endpoint =
        json!({ "knowledgeSpaceId": space, "url": "http://127.0.0.1:9/kfs-hook?token=t0p", "events": ["PAUSED"] });
    api.data(
        Some(&key),
        "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }",
        json!({ "input": endpoint }),
    )
    .await?;
    let log = api.data(Some(&alice), LOG, json!({ "space": space, "first": 1 })).await?;
    let newest = &log["auditEvents"]["edges"][0]["node"];
    ensure_eq!(newest["action"], json!("webhook_endpoint.created"));
    ensure_eq!(newest["actorChannel"], json!("SERVICE_API"));
    ensure!(newest["actorApiKeyId"].is_string(), "{newest}");
    ensure!(
        !log.to_string().contains("kfs-hook") && !log.to_string().contains("t0p"),
        "the endpoint URL is not recorded"
    );

    // Pages follow one another.
    let first = api.data(Some(&alice), LOG, json!({ "space": space, "first": 2 })).await?;
    ensure_eq!(first["auditEvents"]["pageInfo"]["hasNextPage"], json!(true));
    let after = first["auditEvents"]["pageInfo"]["endCursor"].clone();
    let second = api.data(Some(&alice), LOG, json!({ "space": space, "first": 2, "after": after })).await?;
    let all = api.data(Some(&alice), LOG, json!({ "space": space, "first": 4 })).await?;
    ensure_eq!([actions(&first), actions(&second)].concat(), actions(&all));

    // Who may read: the space's owners; not its other members, not another tenant, and
    // nobody without naming the space.
    api.member("alice", &space, "carol", "EDITOR").await?;
    ensure_eq!(api.code(Some(&api.token("carol")), LOG, json!({ "space": space })).await?, "FORBIDDEN");
    let stranger = TestServer::token("alice", "another-tenant");
    ensure_eq!(api.code(Some(&stranger), LOG, json!({ "space": space })).await?, "NOT_FOUND");
    ensure_eq!(api.code(Some(&key), LOG, json!({ "space": space })).await?, "FORBIDDEN");
    ensure_eq!(api.code(Some(&alice), LOG, json!({})).await?, "BAD_USER_INPUT");
    ensure_eq!(api.code(Some(&alice), LOG, json!({ "space": space, "tenant": "x" })).await?, "BAD_USER_INPUT");
    ensure_eq!(api.code(Some(&alice), LOG, json!({ "space": space, "first": 101 })).await?, "BAD_USER_INPUT");
    ensure_eq!(
        api.code(Some(&alice), LOG, json!({ "space": space, "after": "not-a-cursor" })).await?,
        "BAD_USER_INPUT"
    );
    // Operators read across spaces, filtered by tenant.
    let operator = TestServer::token("ops-admin", "operators");
    let huge = "t".repeat(100_000);
    ensure_eq!(api.code(Some(&operator), LOG, json!({ "tenant": huge })).await?, "BAD_USER_INPUT", "a huge tenantId");
    ensure_eq!(api.code(Some(&operator), LOG, json!({ "tenant": "nul\u{0}" })).await?, "BAD_USER_INPUT", "a NUL");
    // A request id that is no sane token is replaced, never recorded as sent.
    let hostile_id = "x".repeat(4_000);
    let response = api
        .server
        .http
        .post(api.server.graphql_url())
        .bearer_auth(&alice)
        .header("x-request-id", &hostile_id)
        .json(&json!({ "query": "mutation($space: UUID!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $space, subjectId: \"carol\") }", "variables": { "space": space } }))
        .send()
        .await?;
    let assigned =
        response.headers().get("x-request-id").and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned();
    ensure!(assigned.len() == 36 && assigned != hostile_id, "the hostile id was kept: {assigned}");
    let newest = api.data(Some(&alice), LOG, json!({ "space": space, "first": 1 })).await?;
    ensure_eq!(newest["auditEvents"]["edges"][0]["node"]["requestId"], json!(assigned));
    let everything = api.data(Some(&operator), LOG, json!({ "tenant": api.tenant, "first": 100 })).await?;
    ensure!(actions(&everything).len() >= 8, "{everything}");
    ensure!(
        everything["auditEvents"]["edges"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|edge| edge["node"]["tenantId"] == json!(api.tenant)),
        "the tenant filter holds"
    );
    api.stop().await;
    Ok(())
}

async fn the_audit_log_is_append_only_and_follows_retention(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let old = audit_event::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(api.tenant.clone()),
        knowledge_space_id: Set(Some(space.parse()?)),
        action: Set("member.added".to_owned()),
        actor_subject_id: Set("alice".to_owned()),
        actor_channel: Set(entity::AccessChannel::Interactive),
        actor_api_key_id: Set(None),
        actor_issuer: Set(None),
        request_id: Set(None),
        target_type: Set("member".to_owned()),
        target_id: Set(Some("old-friend".to_owned())),
        details: Set(json!({})),
        created_at: Set(entity::now_millis() - 40 * 86_400_000),
    };
    audit_event::Entity::insert(old).exec(&db.db).await?;
    // No UPDATE gets through, whatever the client.
    let backend = db.db.get_database_backend();
    let tamper = Statement::from_string(backend, "UPDATE audit_events SET actor_subject_id = 'mallory'".to_owned());
    let refused = db.db.execute_raw(tamper).await;
    ensure!(refused.is_err_and(|error| error.to_string().contains("append-only")), "an audit event was changed");
    // Retention at 30 days removes the 40-day-old event and keeps today's.
    let pruned = worker::lifecycle::prune(&db.db, 30, false, 100, entity::now_millis()).await?;
    ensure_eq!(pruned.audit_events, 1);
    let left = audit_event::Entity::find().count(&db.db).await?;
    ensure!(left >= 1, "today's events are kept");
    let log = api.data(Some(&api.token("alice")), LOG, json!({ "space": space })).await?;
    ensure_eq!(actions(&log), ["knowledge_space.created"]);
    api.stop().await;
    Ok(())
}
