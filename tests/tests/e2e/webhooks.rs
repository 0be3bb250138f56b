//! Webhooks against a receiver that verifies Standard Webhooks signatures: a service
//! client's completed task arrives signed, with ids and no content; failed attempts are
//! retried, recorded and end dead; redelivery keeps the `webhook-id`, as does a sender
//! killed mid-delivery; private addresses are refused by default; an endpoint is its
//! owner's alone.
use std::time::Duration;

use anyhow::{Context as _, ensure};
use entity::{AccessChannel, MemberRole, webhook_delivery as delivery};
use kfs_tests::webhook_receiver::{Answer, WebhookReceiver};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use worker::webhooks::{DeliveryPolicy, WebhookSettings, deliver_due};

use crate::api_support::{Api, string_at};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_service_clients_completed_task_arrives_as_a_verified_standard_webhook,
        failed_attempts_are_retried_recorded_and_end_dead_until_redelivered,
        a_sender_killed_mid_delivery_is_followed_by_one_with_the_same_webhook_id,
        private_addresses_and_plain_http_are_refused_by_default,
        an_endpoint_and_its_deliveries_are_their_owners_alone,
        an_owner_who_lost_the_space_is_sent_nothing_more,
    ]
}

const CREATE: &str = "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { secret endpoint { id url events disabled } } }";
const DELIVERIES: &str = "query($id: UUID!) { webhookDeliveries(endpointId: $id, first: 50) { edges { node { id webhookId status attempts eventType stage sequence lastStatusCode attemptLog { attempt statusCode error } } } } }";

/// A server with the embedded worker, webhooks allowed to loopback, quick retries.
async fn api(db: &TestDb, tweak: impl FnOnce(&mut WebhookSettings)) -> anyhow::Result<Api> {
    let mut webhooks = WebhookSettings {
        allow_private: true,
        retry_base_ms: 50,
        retry_cap_ms: 200,
        timeout_ms: 1_000,
        max_attempts: 4,
        ..WebhookSettings::default()
    };
    tweak(&mut webhooks);
    crate::live_support::api_with(db, |settings| {
        settings.embedded_worker = true;
        settings.worker.poll_interval_ms = 100;
        settings.worker.webhooks = webhooks;
    })
    .await
}

/// Registers an endpoint as `bearer`; returns its id and secret.
async fn endpoint(api: &Api, bearer: &str, space: &str, url: &str, events: Value) -> anyhow::Result<(String, String)> {
    let input = json!({ "knowledgeSpaceId": space, "url": url, "events": events });
    let data = api.data(Some(bearer), CREATE, json!({ "input": input })).await?;
    Ok((string_at(&data, "/createWebhookEndpoint/endpoint/id")?, string_at(&data, "/createWebhookEndpoint/secret")?))
}

async fn deliveries(api: &Api, bearer: &str, endpoint: &str) -> anyhow::Result<Vec<Value>> {
    let data = api.data(Some(bearer), DELIVERIES, json!({ "id": endpoint })).await?;
    let edges = data["webhookDeliveries"]["edges"].as_array().cloned().unwrap_or_default();
    Ok(edges.into_iter().map(|edge| edge["node"].clone()).collect())
}

async fn create_task(api: &Api, bearer: &str, space: &str, query: &str) -> anyhow::Result<String> {
    let mutation =
        "mutation($s: UUID!, $q: String!) { createResearchTask(input: {knowledgeSpaceId: $s, query: $q}) { id } }";
    string_at(&api.data(Some(bearer), mutation, json!({ "s": space, "q": query })).await?, "/createResearchTask/id")
}

async fn a_service_clients_completed_task_arrives_as_a_verified_standard_webhook(db: TestDb) -> anyhow::Result<()> {
    let receiver = WebhookReceiver::start().await?;
    let api = api(&db, |_| {}).await?;
    let space = api.space("alice").await?;
    let owner = api.token("alice");
    let add = "mutation($s: UUID!) { addKnowledgeDocument(input: {knowledgeSpaceId: $s, title: \"Tides\", content: \"Tides are caused by the pull of the moon.\"}) { id } }";
    api.data(Some(&owner), add, json!({ "s": space })).await?;
    let (_, key) = api.key("alice", &space).await?;
    let (endpoint_id, secret) =
        endpoint(&api, &key, &space, &receiver.url(), json!(["STAGE_CHANGED", "FAILED", "CANCELED"])).await?;
    ensure!(secret.starts_with("whsec_"), "{secret}");
    let secret_question = "What causes tides? (a question receivers must never see)";
    let task = create_task(&api, &key, &space, secret_question).await?;

    // stage_changed into retrieving, analyzing, (a second round's retrieving and
    // analyzing: the question is RESEARCH-long and no document holds "receivers"),
    // generating and completed.
    let received = receiver.wait_for(6, Duration::from_secs(30)).await?;
    let completed = received
        .iter()
        .find(|request| request.json()["data"]["stage"] == "completed")
        .context("no completion delivered")?;
    ensure!(completed.verifies_with(&secret), "the signature verifies: {:?}", completed.headers);
    ensure!(!completed.verifies_with("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "and only with the endpoint's secret");
    let body = completed.json();
    ensure_eq!(body["type"], json!("research_task.stage_changed"));
    ensure_eq!(body["data"]["task_id"], json!(task));
    let trace = "query($id: UUID!) { researchTask(id: $id) { answerTrace { id answer } } }";
    let read = api.data(Some(&key), trace, json!({ "id": task })).await?;
    ensure_eq!(body["data"]["answer_trace_id"], read["researchTask"]["answerTrace"]["id"]);
    // Ids, never content: no query, no answer, no evidence in any body.
    let answer = read["researchTask"]["answerTrace"]["answer"].as_str().unwrap_or_default().to_owned();
    for request in &received {
        ensure!(
            !request.body.contains("tides") && !request.body.contains(&answer[..answer.len().min(20)]),
            "{}",
            request.body
        );
        let body = request.json();
        let data: Vec<&String> = body["data"].as_object().map(|fields| fields.keys().collect()).unwrap_or_default();
        ensure_eq!(data, ["answer_trace_id", "knowledge_space_id", "sequence", "stage", "task_id", "thread_id"]);
        ensure_eq!(body["data"]["thread_id"], Value::Null, "a task outside a thread");
        ensure!(request.webhook_id().is_some_and(|id| id.starts_with("msg_")));
    }
    // The endpoint's deliveries, as the API shows them. The sender records a delivery's
    // outcome just after the receiver answered it, so the last one may still be settling.
    let mut listed = Vec::new();
    let settled =
        kfs_tests::process::wait_until(Duration::from_secs(10), "every delivery to be recorded", async || {
            listed = deliveries(&api, &key, &endpoint_id).await?;
            Ok(listed.iter().all(|row| row["status"] == "DELIVERED"))
        })
        .await;
    ensure!(settled.is_ok() && listed.iter().all(|row| row["attempts"] == 1), "{listed:#?}");
    ensure!(listed.iter().any(|row| row["stage"] == "COMPLETED"));
    let ids: Vec<&str> = received.iter().filter_map(|request| request.webhook_id()).collect();
    ensure!(listed.iter().all(|row| ids.contains(&row["webhookId"].as_str().unwrap_or_default())));

    // A turn of a thread: its deliveries carry the thread's id (ids only, as ever).
    let thread = "mutation($s: UUID!) { createResearchThread(input: {knowledgeSpaceId: $s}) { id } }";
    let thread = string_at(&api.data(Some(&key), thread, json!({ "s": space })).await?, "/createResearchThread/id")?;
    let turn = "mutation($s: UUID!, $t: UUID!) { createResearchTask(input: {knowledgeSpaceId: $s, threadId: $t, \
        query: \"Why?\", mode: FAST}) { id } }";
    let turn =
        string_at(&api.data(Some(&key), turn, json!({ "s": space, "t": thread })).await?, "/createResearchTask/id")?;
    let before = received.len();
    let mut of_turn = Vec::new();
    kfs_tests::process::wait_until(Duration::from_secs(30), "the turn's deliveries", async || {
        of_turn = receiver
            .received()
            .into_iter()
            .skip(before)
            .filter(|request| request.json()["data"]["task_id"] == json!(turn))
            .collect();
        Ok(of_turn.iter().any(|request| request.json()["data"]["stage"] == "completed"))
    })
    .await?;
    ensure!(of_turn.iter().all(|request| request.json()["data"]["thread_id"] == json!(thread)), "{of_turn:?}");
    api.stop().await;
    Ok(())
}

async fn failed_attempts_are_retried_recorded_and_end_dead_until_redelivered(db: TestDb) -> anyhow::Result<()> {
    let receiver = WebhookReceiver::start().await?;
    let api = api(&db, |settings| settings.timeout_ms = 300).await?;
    let space = api.space("alice").await?;
    let alice = api.token("alice");
    // STARTED only: one delivery per task.
    let (endpoint_id, secret) = endpoint(&api, &alice, &space, &receiver.url(), json!(["STARTED"])).await?;

    // 500, then a timeout, then 200: delivered on the third attempt.
    receiver.then([Answer::Status(500), Answer::Late(200, Duration::from_millis(900))]);
    create_task(&api, &alice, &space, "first").await?;
    let received = receiver.wait_for(3, Duration::from_secs(20)).await?;
    ensure!(received.iter().all(|request| request.webhook_id() == received[0].webhook_id()), "one webhook-id");
    ensure!(received[2].verifies_with(&secret));
    kfs_tests::process::wait_until(Duration::from_secs(10), "the delivery to settle", async || {
        Ok(deliveries(&api, &alice, &endpoint_id).await?.first().is_some_and(|row| row["status"] == "DELIVERED"))
    })
    .await?;
    let row = deliveries(&api, &alice, &endpoint_id).await?.remove(0);
    ensure_eq!(row["attempts"], json!(3));
    let log = row["attemptLog"].as_array().cloned().unwrap_or_default();
    ensure_eq!(log.len(), 3);
    ensure_eq!(log[0]["statusCode"], json!(500));
    ensure!(
        log[1]["statusCode"].is_null() && log[1]["error"].as_str().is_some_and(|e| e.contains("timed out")),
        "{log:?}"
    );
    ensure_eq!(log[2]["statusCode"], json!(200));

    // Four failures: dead. Redelivered: sent again with the same webhook-id, and delivered.
    receiver.then([Answer::Status(503); 4]);
    let before = receiver.received().len();
    create_task(&api, &alice, &space, "second").await?;
    kfs_tests::process::wait_until(Duration::from_secs(20), "the delivery to die", async || {
        Ok(deliveries(&api, &alice, &endpoint_id).await?.first().is_some_and(|row| row["status"] == "DEAD"))
    })
    .await?;
    let dead = deliveries(&api, &alice, &endpoint_id).await?.remove(0);
    ensure_eq!(dead["attempts"], json!(4));
    ensure_eq!(dead["lastStatusCode"], json!(503));
    ensure_eq!(receiver.received().len(), before + 4);
    let redeliver = "mutation($id: UUID!) { redeliverWebhook(deliveryId: $id) { status attempts webhookId } }";
    let again = api.data(Some(&alice), redeliver, json!({ "id": dead["id"] })).await?;
    ensure_eq!(again["redeliverWebhook"]["status"], json!("PENDING"));
    let received = receiver.wait_for(before + 5, Duration::from_secs(10)).await?;
    ensure_eq!(received[before + 4].webhook_id(), dead["webhookId"].as_str(), "the same webhook-id");
    kfs_tests::process::wait_until(Duration::from_secs(10), "the redelivery to land", async || {
        Ok(deliveries(&api, &alice, &endpoint_id).await?.first().is_some_and(|row| row["status"] == "DELIVERED"))
    })
    .await?;
    api.stop().await;
    Ok(())
}

async fn a_sender_killed_mid_delivery_is_followed_by_one_with_the_same_webhook_id(db: TestDb) -> anyhow::Result<()> {
    let receiver = WebhookReceiver::start().await?;
    let space = fixtures::space(&db).await?;
    let owner = fixtures::member(&db, &space, "owner", MemberRole::Owner).await?;
    let row = entity::webhook_endpoint::ActiveModel {
        id: sea_orm::ActiveValue::Set(uuid::Uuid::now_v7()),
        tenant_id: sea_orm::ActiveValue::Set(space.tenant_id.clone()),
        knowledge_space_id: sea_orm::ActiveValue::Set(space.id),
        subject_id: sea_orm::ActiveValue::Set("owner".into()),
        url: sea_orm::ActiveValue::Set(receiver.url()),
        events: sea_orm::ActiveValue::Set(json!(["research_task.started"])),
        secret: sea_orm::ActiveValue::Set(worker::webhooks::new_secret()),
        disabled_at: sea_orm::ActiveValue::Set(None),
        created_at: sea_orm::ActiveValue::Set(entity::now_millis()),
        updated_at: sea_orm::ActiveValue::Set(entity::now_millis()),
    };
    entity::webhook_endpoint::Entity::insert(row).exec(&db.db).await?;
    let task = fixtures::job(&db, &owner, AccessChannel::Interactive).await?;
    worker::lifecycle::claim_due(&db.db, &worker::Notifier::new(), "worker", 60_000, 1, entity::now_millis()).await?;
    let queued = delivery::Entity::find().filter(delivery::Column::ResearchTaskJobId.eq(task.id)).all(&db.db).await?;
    ensure_eq!(queued.len(), 1, "the started event queued one delivery in its transaction");

    let settings =
        WebhookSettings { allow_private: true, lock_ms: 300, timeout_ms: 30_000, ..WebhookSettings::default() };
    let policy = |worker: &str| -> anyhow::Result<DeliveryPolicy> {
        Ok(DeliveryPolicy {
            settings: settings.clone(),
            client: worker::webhooks::address::client(Duration::from_secs(30), true)?,
            worker_id: worker.to_owned(),
        })
    };
    // The first sender's request hangs; the sender dies with it (its task is aborted).
    receiver.then([Answer::Hang]);
    let (db_a, first) = (db.db.clone(), policy("sender-a")?);
    let doomed = tokio::spawn(async move { deliver_due(&db_a, &first, entity::now_millis()).await });
    receiver.wait_for(1, Duration::from_secs(10)).await?;
    doomed.abort();
    // Until its lock lapses nobody else sends; after, the next sender does, same id.
    ensure_eq!(deliver_due(&db.db, &policy("sender-b")?, entity::now_millis()).await?, 0, "locked");
    tokio::time::sleep(Duration::from_millis(400)).await;
    ensure_eq!(deliver_due(&db.db, &policy("sender-b")?, entity::now_millis()).await?, 1);
    let received = receiver.received();
    ensure_eq!(received.len(), 2);
    ensure_eq!(received[0].webhook_id(), received[1].webhook_id());
    let settled = delivery::Entity::find_by_id(queued[0].id).one(&db.db).await?.context("delivery")?;
    ensure_eq!(settled.status, "delivered");
    Ok(())
}

async fn private_addresses_and_plain_http_are_refused_by_default(db: TestDb) -> anyhow::Result<()> {
    let api = api(&db, |settings| settings.allow_private = false).await?;
    let space = api.space("alice").await?;
    let alice = api.token("alice");
    for url in [
        "http://example.com/hook",
        "https://127.0.0.1/hook",
        "https://localhost:8443/hook",
        "https://10.0.0.8/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        // Accepted before: IPv4-compatible, NAT64, site-local and IETF protocol assignments.
        "https://[::127.0.0.1]/hook",
        "https://[64:ff9b::127.0.0.1]/hook",
        "https://[64:ff9b::169.254.169.254]/hook",
        "https://[64:ff9b:1::a00:1]/hook",
        "https://[2002:7f00:1::1]/hook",
        "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",
        "https://[fec0::1]/hook",
        "https://192.0.0.1/hook",
        "https://192.0.0.170/hook",
        "https://[ff02::1]/hook",
        "https://224.0.0.1/hook",
        "ftp://example.com/hook",
        "not a url",
        &format!("https://example.com/{}", "a".repeat(3_000)),
    ] {
        let input = json!({ "knowledgeSpaceId": space, "url": url, "events": ["STARTED"] });
        ensure_eq!(api.code(Some(&alice), CREATE, json!({ "input": input })).await?, "BAD_USER_INPUT", "{url}");
    }
    let input = json!({ "knowledgeSpaceId": space, "url": "https://127.0.0.1/hook", "events": [] });
    ensure_eq!(api.code(Some(&alice), CREATE, json!({ "input": input })).await?, "BAD_USER_INPUT", "no events");
    api.stop().await;
    Ok(())
}

async fn an_endpoint_and_its_deliveries_are_their_owners_alone(db: TestDb) -> anyhow::Result<()> {
    let receiver = WebhookReceiver::start().await?;
    let api = api(&db, |_| {}).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "EDITOR").await?;
    let (alice, bob) = (api.token("alice"), api.token("bob"));
    let (endpoint_id, _) = endpoint(&api, &alice, &space, &receiver.url(), json!(["STARTED"])).await?;
    // Bob's task is not Alice's: nothing arrives at her endpoint.
    create_task(&api, &bob, &space, "bob's question").await?;
    let mine = create_task(&api, &alice, &space, "alice's question").await?;
    let received = receiver.wait_for(1, Duration::from_secs(20)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure_eq!(receiver.received().len(), 1, "only the owner's own task: {received:?}");
    ensure_eq!(received[0].json()["data"]["task_id"], json!(mine));
    let delivered = deliveries(&api, &alice, &endpoint_id).await?;
    ensure_eq!(delivered.len(), 1);
    // Bob (and a stranger) see none of it, as if it did not exist.
    let stranger = kfs_tests::server::TestServer::token("mallory", "elsewhere");
    for bearer in [&bob, &stranger] {
        ensure_eq!(api.code(Some(bearer), DELIVERIES, json!({ "id": endpoint_id })).await?, "NOT_FOUND");
        let rotate = "mutation($id: UUID!) { rotateWebhookSecret(id: $id) { secret } }";
        ensure_eq!(api.code(Some(bearer), rotate, json!({ "id": endpoint_id })).await?, "NOT_FOUND");
        let disable = "mutation($id: UUID!) { disableWebhookEndpoint(id: $id) { disabled } }";
        ensure_eq!(api.code(Some(bearer), disable, json!({ "id": endpoint_id })).await?, "NOT_FOUND");
        let redeliver = "mutation($id: UUID!) { redeliverWebhook(deliveryId: $id) { status } }";
        ensure_eq!(api.code(Some(bearer), redeliver, json!({ "id": delivered[0]["id"] })).await?, "NOT_FOUND");
    }
    let listed = "query($s: UUID!) { knowledgeSpace(id: $s) { webhookEndpoints { id } } }";
    let bobs = api.data(Some(&bob), listed, json!({ "s": space })).await?;
    ensure_eq!(bobs["knowledgeSpace"]["webhookEndpoints"], json!([]));
    let alices = api.data(Some(&alice), listed, json!({ "s": space })).await?;
    ensure_eq!(alices["knowledgeSpace"]["webhookEndpoints"][0]["id"], json!(endpoint_id));
    // Disabled: no more deliveries; a rotated secret signs what follows.
    let rotate = "mutation($id: UUID!) { rotateWebhookSecret(id: $id) { secret } }";
    let rotated =
        string_at(&api.data(Some(&alice), rotate, json!({ "id": endpoint_id })).await?, "/rotateWebhookSecret/secret")?;
    create_task(&api, &alice, &space, "after rotation").await?;
    let received = receiver.wait_for(2, Duration::from_secs(20)).await?;
    ensure!(received[1].verifies_with(&rotated));
    let disable = "mutation($id: UUID!) { disableWebhookEndpoint(id: $id) { disabled } }";
    ensure_eq!(
        api.data(Some(&alice), disable, json!({ "id": endpoint_id })).await?["disableWebhookEndpoint"]["disabled"],
        json!(true)
    );
    create_task(&api, &alice, &space, "after disabling").await?;
    tokio::time::sleep(Duration::from_millis(800)).await;
    ensure_eq!(receiver.received().len(), 2, "nothing after disabling");
    api.stop().await;
    Ok(())
}

async fn an_owner_who_lost_the_space_is_sent_nothing_more(db: TestDb) -> anyhow::Result<()> {
    let receiver = WebhookReceiver::start().await?;
    // No embedded worker yet: the grants die before any stage runs.
    let api = crate::live_support::api_with(&db, |settings| settings.worker.webhooks.allow_private = true).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "EDITOR").await?;
    let (key_id, key) = api.key("alice", &space).await?;
    let events = json!(["STARTED", "FAILED", "STAGE_CHANGED"]);
    endpoint(&api, &key, &space, &receiver.url(), events.clone()).await?;
    let (bobs_endpoint, _) = endpoint(&api, &api.token("bob"), &space, &receiver.url(), events).await?;
    let secret_question = "Which secret project is the board discussing?";
    create_task(&api, &key, &space, secret_question).await?;
    create_task(&api, &api.token("bob"), &space, secret_question).await?;
    let revoke = "mutation($id: UUID!) { revokeApiKey(id: $id) { id } }";
    api.data(Some(&api.token("alice")), revoke, json!({ "id": key_id })).await?;
    let remove = "mutation($s: UUID!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $s, subjectId: \"bob\") }";
    api.call(Some(&api.token("alice")), remove, json!({ "s": space })).await?;
    // Bob no longer reaches his endpoint either: it answers as missing.
    ensure_eq!(api.code(Some(&api.token("bob")), DELIVERIES, json!({ "id": bobs_endpoint })).await?, "NOT_FOUND");

    let (shutdown, tracker) = (worker::runtime::CancellationToken::new(), worker::runtime::TaskTracker::new());
    let mut settings = crate::worker_support::settings("after-revocation");
    settings.webhooks.allow_private = true;
    settings.webhooks.retry_base_ms = 50;
    let state = &api.server.server.state;
    worker::runtime::spawn(state.db.clone(), state.notifier.clone(), settings, shutdown.clone(), &tracker)?;
    // Each task: started, then failed on its dead grant; each delivery is settled at
    // sending time, when its owner's access is checked, and dies unsent.
    kfs_tests::process::wait_until(Duration::from_secs(30), "four deliveries to die", async || {
        let dead = delivery::Entity::find().filter(delivery::Column::Status.eq("dead")).all(&db.db).await?;
        Ok(dead.len() >= 4)
    })
    .await?;
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    ensure!(receiver.received().is_empty(), "sent to an owner without access: {:?}", receiver.received());
    let rows = delivery::Entity::find().all(&db.db).await?;
    ensure!(
        rows.iter().all(|row| row.status == "dead"
            && row.last_error.as_deref().is_some_and(|error| error.contains("no longer has access"))),
        "{rows:#?}"
    );
    api.stop().await;
    Ok(())
}
