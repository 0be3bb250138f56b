//! Research threads through GraphQL: created, read, listed, updated and deleted by their
//! creator only; tasks created in one become its turns (oldest first, `threadId` on each);
//! a thread of another space, subject or tenant is refused as the contract says; an
//! idempotency key is the thread's; a thread holds at most `KFS_THREAD_MAX_TURNS` turns.
use anyhow::{Context as _, ensure};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::{Value, json};

use crate::api_support::{Api, string_at};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_thread_holds_its_turns_oldest_first_and_only_its_creator_sees_it,
        a_thread_refuses_another_space_a_foreign_id_and_bad_input,
        an_idempotency_key_is_scoped_to_its_thread,
        deleting_a_thread_deletes_its_turns_and_is_audited,
        a_thread_holds_at_most_the_configured_turns,
    ]
}

const CREATE_THREAD: &str = "mutation($input: CreateResearchThreadInput!) { createResearchThread(input: $input) { \
    id knowledgeSpaceId title metadata createdAt updatedAt } }";
const CREATE_TASK: &str = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { \
    id threadId query } }";
const THREAD: &str = "query($id: UUID!) { researchThread(id: $id) { id title metadata updatedAt \
    tasks(first: 10) { edges { node { id threadId query } } pageInfo { hasNextPage } } } }";
const THREADS: &str = "query($space: UUID!, $first: Int, $after: String) { researchThreads(knowledgeSpaceId: $space, \
    first: $first, after: $after) { edges { cursor node { id title } } pageInfo { hasNextPage endCursor } } }";
const UPDATE: &str = "mutation($id: UUID!, $input: UpdateResearchThreadInput!) { updateResearchThread(id: $id, \
    input: $input) { id title metadata } }";
const DELETE: &str = "mutation($id: UUID!) { deleteResearchThread(id: $id) }";
const TASK: &str = "query($id: UUID!) { researchTask(id: $id) { id threadId } }";

async fn thread(api: &Api, token: &str, space: &str, title: Option<&str>) -> anyhow::Result<Value> {
    let input = json!({ "knowledgeSpaceId": space, "title": title, "metadata": { "topic": "cluster" } });
    let data = api.data(Some(token), CREATE_THREAD, json!({ "input": input })).await?;
    Ok(data["createResearchThread"].clone())
}

async fn turn(api: &Api, token: &str, space: &str, thread: &str, query: &str) -> anyhow::Result<Value> {
    let input = json!({ "knowledgeSpaceId": space, "query": query, "threadId": thread });
    Ok(api.data(Some(token), CREATE_TASK, json!({ "input": input })).await?["createResearchTask"].clone())
}

async fn a_thread_holds_its_turns_oldest_first_and_only_its_creator_sees_it(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "EDITOR").await?;
    let (alice, bob) = (api.token("alice"), api.token("bob"));
    let created = thread(&api, &alice, &space, Some("Cluster questions")).await?;
    let id = string_at(&created, "/id")?;
    ensure_eq!(created["knowledgeSpaceId"], json!(space));
    ensure_eq!(created["title"], json!("Cluster questions"));
    ensure_eq!(created["metadata"], json!({ "topic": "cluster" }));

    let first = turn(&api, &alice, &space, &id, "How does the cluster module distribute connections?").await?;
    ensure_eq!(first["threadId"], json!(id));
    let second = turn(&api, &alice, &space, &id, "And on Windows?").await?;
    let outside = api.task(&alice, &space).await?;
    ensure_eq!(outside["threadId"], Value::Null, "a task outside a thread has none");

    let read = api.data(Some(&alice), THREAD, json!({ "id": id })).await?;
    let turns: Vec<&Value> = read["researchThread"]["tasks"]["edges"]
        .as_array()
        .context("edges")?
        .iter()
        .map(|edge| &edge["node"]["id"])
        .collect();
    ensure_eq!(turns, vec![&first["id"], &second["id"]], "oldest first, the task outside not among them");
    ensure!(
        read["researchThread"]["updatedAt"].as_str() >= created["updatedAt"].as_str(),
        "a turn updates the thread: {read}"
    );

    // Bob, in the same space, sees neither the thread nor it in his list.
    ensure_eq!(api.data(Some(&bob), THREAD, json!({ "id": id })).await?["researchThread"], Value::Null);
    let listed = api.data(Some(&bob), THREADS, json!({ "space": space })).await?;
    ensure_eq!(listed["researchThreads"]["edges"], json!([]));

    // Alice's list pages most recently updated first.
    let newer = thread(&api, &alice, &space, None).await?;
    let page = api.data(Some(&alice), THREADS, json!({ "space": space, "first": 1 })).await?;
    ensure_eq!(page["researchThreads"]["edges"][0]["node"]["id"], newer["id"]);
    ensure_eq!(page["researchThreads"]["pageInfo"]["hasNextPage"], json!(true));
    let cursor = page["researchThreads"]["pageInfo"]["endCursor"].clone();
    let rest = api.data(Some(&alice), THREADS, json!({ "space": space, "first": 5, "after": cursor })).await?;
    ensure_eq!(rest["researchThreads"]["edges"][0]["node"]["id"], json!(id));

    // An omitted field keeps its value; a null title clears it.
    let update = |input: Value| api.data(Some(&alice), UPDATE, json!({ "id": id, "input": input }));
    let kept = update(json!({ "metadata": { "topic": "windows" } })).await?;
    ensure_eq!(kept["updateResearchThread"]["title"], json!("Cluster questions"));
    ensure_eq!(kept["updateResearchThread"]["metadata"], json!({ "topic": "windows" }));
    let cleared = update(json!({ "title": null })).await?;
    ensure_eq!(cleared["updateResearchThread"]["title"], Value::Null);
    ensure_eq!(cleared["updateResearchThread"]["metadata"], json!({ "topic": "windows" }));
    let foreign = api.code(Some(&bob), UPDATE, json!({ "id": id, "input": { "title": "mine" } })).await?;
    ensure_eq!(foreign, "NOT_FOUND");

    // A member removed loses the thread until re-added.
    api.member("alice", &space, "carol", "VIEWER").await?;
    let carol = api.token("carol");
    let theirs = string_at(&thread(&api, &carol, &space, None).await?, "/id")?;
    let remove =
        "mutation($space: UUID!) { removeKnowledgeSpaceMember(knowledgeSpaceId: $space, subjectId: \"carol\") }";
    api.data(Some(&alice), remove, json!({ "space": space })).await?;
    ensure_eq!(api.data(Some(&carol), THREAD, json!({ "id": theirs })).await?["researchThread"], Value::Null);
    api.member("alice", &space, "carol", "VIEWER").await?;
    ensure_eq!(api.data(Some(&carol), THREAD, json!({ "id": theirs })).await?["researchThread"]["id"], json!(theirs));
    api.stop().await;
    Ok(())
}

async fn a_thread_refuses_another_space_a_foreign_id_and_bad_input(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let (space, other) = (api.space("alice").await?, api.space("alice").await?);
    let bob_space = api.space("bob").await?;
    let (alice, bob) = (api.token("alice"), api.token("bob"));
    let id = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    let api = &api;
    let ask = async |token: &str, space: &str, thread: &str| {
        let input = json!({ "knowledgeSpaceId": space, "query": "Why?", "threadId": thread });
        api.code(Some(token), CREATE_TASK, json!({ "input": input })).await
    };
    ensure_eq!(ask(&alice, &other, &id).await?, "BAD_USER_INPUT", "another space");
    ensure_eq!(ask(&bob, &bob_space, &id).await?, "NOT_FOUND", "another subject's thread");
    let random = uuid::Uuid::new_v4().to_string();
    ensure_eq!(ask(&alice, &space, &random).await?, "NOT_FOUND", "no such thread");
    // Another tenant's subject of the same name sees nothing either.
    let stranger = kfs_tests::server::TestServer::token("alice", "another-tenant");
    ensure_eq!(api.data(Some(&stranger), THREAD, json!({ "id": id })).await?["researchThread"], Value::Null);

    let create = |input: Value| api.code(Some(&alice), CREATE_THREAD, json!({ "input": input }));
    let long = "t".repeat(513);
    ensure_eq!(create(json!({ "knowledgeSpaceId": space, "title": long })).await?, "BAD_USER_INPUT");
    ensure_eq!(create(json!({ "knowledgeSpaceId": space, "metadata": [1] })).await?, "BAD_USER_INPUT");
    ensure_eq!(create(json!({ "knowledgeSpaceId": bob_space })).await?, "NOT_FOUND", "a space alice cannot read");
    let title = "t".repeat(512);
    let fits = thread(api, &alice, &space, Some(&title)).await?;
    ensure_eq!(fits["title"].as_str().map(str::len), Some(512));
    Ok(())
}

async fn an_idempotency_key_is_scoped_to_its_thread(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let alice = api.token("alice");
    let one = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    let two = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    let create = |thread: Option<&str>| {
        let input = json!({ "knowledgeSpaceId": space, "query": "And on Windows?", "threadId": thread, "idempotencyKey": "k1" });
        api.data(Some(&alice), CREATE_TASK, json!({ "input": input }))
    };
    let first = create(Some(&one)).await?["createResearchTask"].clone();
    let again = create(Some(&one)).await?["createResearchTask"].clone();
    ensure_eq!(again["id"], first["id"], "the same turn");
    let elsewhere = create(Some(&two)).await?["createResearchTask"].clone();
    ensure!(elsewhere["id"] != first["id"], "the same key in another thread is a new turn");
    ensure_eq!(elsewhere["threadId"], json!(two));
    let outside = create(None).await?["createResearchTask"].clone();
    ensure!(outside["id"] != first["id"] && outside["id"] != elsewhere["id"], "and outside threads another task");
    let read = api.data(Some(&alice), THREAD, json!({ "id": one })).await?;
    ensure_eq!(read["researchThread"]["tasks"]["edges"].as_array().map(Vec::len), Some(1), "one turn, not two");
    api.stop().await;
    Ok(())
}

async fn deleting_a_thread_deletes_its_turns_and_is_audited(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "EDITOR").await?;
    let (alice, bob) = (api.token("alice"), api.token("bob"));
    let id = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    let first = turn(&api, &alice, &space, &id, "How do leases work?").await?;
    let second = turn(&api, &alice, &space, &id, "And when they expire?").await?;
    let outside = api.task(&alice, &space).await?;
    ensure_eq!(api.code(Some(&bob), DELETE, json!({ "id": id })).await?, "NOT_FOUND", "only its creator deletes it");
    ensure_eq!(api.data(Some(&alice), DELETE, json!({ "id": id })).await?["deleteResearchThread"], json!(true));
    ensure_eq!(api.data(Some(&alice), THREAD, json!({ "id": id })).await?["researchThread"], Value::Null);
    for task in [&first, &second] {
        let read = api.data(Some(&alice), TASK, json!({ "id": task["id"] })).await?;
        ensure_eq!(read["researchTask"], Value::Null, "a turn goes with its thread");
    }
    let kept = api.data(Some(&alice), TASK, json!({ "id": outside["id"] })).await?;
    ensure_eq!(kept["researchTask"]["id"], outside["id"], "a task outside the thread stays");
    ensure_eq!(api.code(Some(&alice), DELETE, json!({ "id": id })).await?, "NOT_FOUND", "deleted once");
    let audit = "query($space: UUID!) { auditEvents(knowledgeSpaceId: $space, first: 20) { edges { node { action \
        targetId } } } }";
    let events = api.data(Some(&alice), audit, json!({ "space": space })).await?;
    let actions: Vec<(String, String)> = events["auditEvents"]["edges"]
        .as_array()
        .context("edges")?
        .iter()
        .map(|edge| {
            let node = &edge["node"];
            (
                node["action"].as_str().unwrap_or_default().to_owned(),
                node["targetId"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    ensure!(actions.contains(&("research_thread.deleted".to_owned(), id.clone())), "{actions:?}");
    for task in [&first, &second] {
        let task_id = task["id"].as_str().unwrap_or_default().to_owned();
        ensure!(actions.contains(&("research_task.deleted".to_owned(), task_id)), "{actions:?}");
    }
    api.stop().await;
    Ok(())
}

async fn a_thread_holds_at_most_the_configured_turns(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.worker.thread_max_turns = 2).await?;
    let space = api.space("alice").await?;
    let alice = api.token("alice");
    let id = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    turn(&api, &alice, &space, &id, "One?").await?;
    turn(&api, &alice, &space, &id, "Two?").await?;
    let input = json!({ "knowledgeSpaceId": space, "query": "Three?", "threadId": id });
    let body = api.call(Some(&alice), CREATE_TASK, json!({ "input": input })).await?;
    ensure_eq!(body["errors"][0]["extensions"]["code"], json!("BAD_USER_INPUT"), "{body}");
    let message = body["errors"][0]["message"].as_str().unwrap_or_default();
    ensure!(message.contains("at most 2 turns"), "{message}");
    api.stop().await;
    Ok(())
}
