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
        reject_refuses_a_turn_while_one_is_in_flight_and_exactly_one_of_a_race_wins,
        enqueue_holds_later_turns_back_until_the_earlier_ones_end_in_creation_order,
        interrupt_cancels_and_rollback_deletes_the_turns_in_flight,
        mcp_starts_a_thread_asks_in_it_and_answers_its_id,
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
    let huge = json!({ "blob": "x".repeat(17 * 1024) });
    ensure_eq!(
        create(json!({ "knowledgeSpaceId": space, "metadata": huge })).await?,
        "BAD_USER_INPUT",
        "16 KB at most"
    );
    let mut deep = json!(1);
    for _ in 0..40 {
        deep = json!({ "a": deep });
    }
    ensure_eq!(create(json!({ "knowledgeSpaceId": space, "metadata": deep })).await?, "BAD_USER_INPUT", "depth");
    let update = "mutation($id: UUID!, $m: JSON) { updateResearchThread(id: $id, input: {metadata: $m}) { id } }";
    let body = api.call(Some(&alice), update, json!({ "id": id, "m": [1] })).await?;
    ensure_eq!(body["errors"][0]["extensions"]["code"], json!("BAD_USER_INPUT"), "{body}");
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
    // Turns created while the thread is deleted go with it: none is left outside a thread.
    let racing = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    turn(&api, &alice, &space, &racing, "First?").await?;
    let creates = (0..6).map(|n| {
        let input = json!({ "knowledgeSpaceId": space, "query": format!("Turn {n}?"), "threadId": racing });
        api.call(Some(&alice), CREATE_TASK, json!({ "input": input }))
    });
    let (created, deleted) =
        tokio::join!(futures_util::future::join_all(creates), api.call(Some(&alice), DELETE, json!({ "id": racing })));
    ensure_eq!(deleted?["data"]["deleteResearchThread"], json!(true));
    for answer in created {
        let answer = answer?;
        match answer["data"]["createResearchTask"]["id"].as_str() {
            Some(task) => {
                let read = api.data(Some(&alice), TASK, json!({ "id": task })).await?;
                ensure_eq!(read["researchTask"], Value::Null, "a turn created during deletion survived it");
            }
            None => ensure_eq!(answer["errors"][0]["extensions"]["code"], json!("NOT_FOUND"), "{answer}"),
        }
    }
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

const CREATE_TURN: &str = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { \
    id threadId stage } }";

/// A turn with a strategy (and optionally an idempotency key): the whole response.
async fn strategy_turn(
    api: &Api,
    token: &str,
    space: &str,
    thread: &str,
    strategy: &str,
    key: Option<&str>,
) -> anyhow::Result<Value> {
    let input = json!({ "knowledgeSpaceId": space, "query": "And then?", "threadId": thread,
                        "multitaskStrategy": strategy, "idempotencyKey": key });
    api.call(Some(token), CREATE_TURN, json!({ "input": input })).await
}

async fn stage_of(api: &Api, token: &str, task: &Value) -> anyhow::Result<Value> {
    let read =
        api.data(Some(token), "query($id: UUID!) { researchTask(id: $id) { stage } }", json!({ "id": task })).await?;
    Ok(read["researchTask"]["stage"].clone())
}

async fn reject_refuses_a_turn_while_one_is_in_flight_and_exactly_one_of_a_race_wins(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let alice = api.token("alice");
    let id = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    let first = strategy_turn(&api, &alice, &space, &id, "REJECT", Some("k1")).await?;
    let first_id = first["data"]["createResearchTask"]["id"].clone();
    ensure_eq!(first["data"]["createResearchTask"]["stage"], json!("QUEUED"), "{first}");
    let refused = strategy_turn(&api, &alice, &space, &id, "REJECT", None).await?;
    ensure_eq!(refused["errors"][0]["extensions"]["code"], json!("CONFLICT"), "{refused}");
    ensure_eq!(refused["errors"][0]["extensions"]["taskId"], first_id, "names the turn in flight");
    // A repeated key returns its turn, whatever the strategy.
    let again = strategy_turn(&api, &alice, &space, &id, "REJECT", Some("k1")).await?;
    ensure_eq!(again["data"]["createResearchTask"]["id"], first_id, "{again}");

    // Eight at once on an idle thread: exactly one is created.
    let idle = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    let sent = (0..8).map(|_| strategy_turn(&api, &alice, &space, &idle, "REJECT", None));
    let answers = futures_util::future::join_all(sent).await;
    let mut created = 0;
    for answer in answers {
        let answer = answer?;
        if answer["data"]["createResearchTask"]["id"].is_string() {
            created += 1;
        } else {
            ensure_eq!(answer["errors"][0]["extensions"]["code"], json!("CONFLICT"), "{answer}");
        }
    }
    ensure_eq!(created, 1, "exactly one of a race wins");
    api.stop().await;
    Ok(())
}

async fn enqueue_holds_later_turns_back_until_the_earlier_ones_end_in_creation_order(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let alice = api.token("alice");
    let id = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    let mut turns = Vec::new();
    for strategy in ["ENQUEUE", "ENQUEUE", "ENQUEUE"] {
        let created = strategy_turn(&api, &alice, &space, &id, strategy, None).await?;
        turns.push(created["data"]["createResearchTask"]["id"].clone());
    }
    // A task outside the thread is not held up.
    let outside = api.task(&alice, &space).await?["id"].clone();
    let notifier = worker::Notifier::new();
    let claim = async || -> anyhow::Result<Vec<String>> {
        let claimed = worker::lifecycle::claim_due(&db.db, &notifier, "w", 60_000, 10, entity::now_millis()).await?;
        Ok(claimed.into_iter().map(|claimed| claimed.job.id.to_string()).collect())
    };
    let mut first = claim().await?;
    first.sort();
    let mut expected =
        vec![turns[0].as_str().unwrap_or_default().to_owned(), outside.as_str().unwrap_or_default().to_owned()];
    expected.sort();
    ensure_eq!(first, expected, "only the first turn (and the task outside) is claimable");
    ensure_eq!(claim().await?, Vec::<String>::new(), "the later turns hold no lease while they wait");
    // However the first ends (canceled here), the second is next, then the third.
    let cancel = "mutation($id: UUID!) { cancelResearchTask(id: $id) { stage } }";
    api.data(Some(&alice), cancel, json!({ "id": turns[0] })).await?;
    ensure_eq!(claim().await?, vec![turns[1].as_str().unwrap_or_default().to_owned()]);
    api.data(Some(&alice), DELETE_TASK, json!({ "id": turns[1] })).await?;
    ensure_eq!(claim().await?, vec![turns[2].as_str().unwrap_or_default().to_owned()], "a deleted turn releases too");
    api.stop().await;
    Ok(())
}

const DELETE_TASK: &str = "mutation($id: UUID!) { deleteResearchTask(id: $id) }";

async fn interrupt_cancels_and_rollback_deletes_the_turns_in_flight(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let alice = api.token("alice");
    let id = string_at(&thread(&api, &alice, &space, None).await?, "/id")?;
    let first =
        strategy_turn(&api, &alice, &space, &id, "ENQUEUE", None).await?["data"]["createResearchTask"]["id"].clone();
    let second =
        strategy_turn(&api, &alice, &space, &id, "INTERRUPT", None).await?["data"]["createResearchTask"]["id"].clone();
    ensure_eq!(stage_of(&api, &alice, &first).await?, json!("CANCELED"), "interrupted, kept");
    ensure_eq!(stage_of(&api, &alice, &second).await?, json!("QUEUED"));
    let third =
        strategy_turn(&api, &alice, &space, &id, "ROLLBACK", None).await?["data"]["createResearchTask"]["id"].clone();
    ensure_eq!(stage_of(&api, &alice, &second).await?, Value::Null, "rolled back: gone");
    let read = api.data(Some(&alice), THREAD, json!({ "id": id })).await?;
    let listed: Vec<Value> = read["researchThread"]["tasks"]["edges"]
        .as_array()
        .context("edges")?
        .iter()
        .map(|edge| edge["node"]["id"].clone())
        .collect();
    ensure_eq!(listed, vec![first, third], "the canceled turn stays; the rolled-back one is gone");
    api.stop().await;
    Ok(())
}

async fn mcp_starts_a_thread_asks_in_it_and_answers_its_id(db: TestDb) -> anyhow::Result<()> {
    use crate::mcp_endpoint::call;
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let alice = api.token("alice");
    let started = call(
        &api,
        &alice,
        "start_research",
        json!({ "space_id": space, "question": "How do leases work?",
                                                              "new_thread": true }),
    )
    .await?;
    let content = &started["result"]["structuredContent"];
    let thread = content["thread_id"].as_str().context("a new thread's id")?.to_owned();
    let first = content["task_id"].clone();
    let read = api.data(Some(&alice), THREAD, json!({ "id": thread })).await?;
    ensure_eq!(read["researchThread"]["tasks"]["edges"][0]["node"]["id"], first, "the question is its first turn");

    let ask = |strategy: &'static str| {
        let arguments = json!({ "space_id": space, "question": "And when they expire?", "thread_id": thread,
                                "multitask_strategy": strategy });
        call(&api, &alice, "start_research", arguments)
    };
    let refused = ask("reject").await?;
    ensure_eq!(refused["result"]["isError"], json!(true), "{refused}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap_or_default();
    ensure!(text.contains("CONFLICT") || text.contains("in flight"), "{text}");
    let queued = ask("enqueue").await?;
    let second = queued["result"]["structuredContent"]["task_id"].clone();
    ensure_eq!(queued["result"]["structuredContent"]["thread_id"], json!(thread));
    let got = call(&api, &alice, "get_research", json!({ "task_id": second })).await?;
    ensure_eq!(got["result"]["structuredContent"]["thread_id"], json!(thread), "{got}");
    let plain = call(&api, &alice, "start_research", json!({ "space_id": space, "question": "Why?" })).await?;
    ensure_eq!(plain["result"]["structuredContent"]["thread_id"], Value::Null);
    let bad = ask("later").await?;
    ensure_eq!(bad["result"]["isError"], json!(true), "{bad}");
    let both = call(
        &api,
        &alice,
        "start_research",
        json!({ "space_id": space, "question": "Why?",
                                                           "thread_id": thread, "new_thread": true }),
    )
    .await?;
    ensure_eq!(both["result"]["isError"], json!(true), "{both}");
    // A new thread for a refused question is not left behind.
    let other = api.space("alice").await?;
    let question = "q".repeat(4001);
    let arguments = json!({ "space_id": other, "question": question, "new_thread": true });
    let refused = call(&api, &alice, "start_research", arguments).await?;
    ensure_eq!(refused["result"]["isError"], json!(true), "{refused}");
    let listed = api.data(Some(&alice), THREADS, json!({ "space": other })).await?;
    ensure_eq!(listed["researchThreads"]["edges"], json!([]), "no empty thread left");
    api.stop().await;
    Ok(())
}
