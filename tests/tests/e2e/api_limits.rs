//! Every input limit answers with its code (BAD_USER_INPUT or TOO_COMPLEX), never a 5xx,
//! and GraphiQL's introspection query stays within the depth and complexity limits.
use anyhow::ensure;
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};

use crate::api_support::{Api, CREATE_KEY, CREATE_SPACE, CREATE_TASK, PAUSE};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        every_limit_is_answered_with_its_code,
        every_limits_key_is_typed_and_an_unknown_key_is_refused,
        the_graphiql_introspection_query_is_allowed,
    ]
}

async fn every_limit_is_answered_with_its_code(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let task = api.task(&token, &space).await?;
    let task_input = |field: &str, value: Value| {
        let mut input = json!({ "knowledgeSpaceId": space, "query": "q" });
        input[field] = value;
        json!({ "input": input })
    };
    let past = "2000-01-01T00:00:00Z";
    let big_object = json!({ "x": "y".repeat(17 * 1024) });
    let tasks = "query($s: UUID!, $first: Int, $after: String) { researchTasks(knowledgeSpaceId: $s, first: $first, after: $after) { edges { cursor } } }";
    let spaces = "query($first: Int) { knowledgeSpaces(first: $first) { edges { cursor } } }";
    let events = "query($id: UUID!, $a: Int, $f: Int) { researchTask(id: $id) { progressEvents(afterSequence: $a, first: $f) { id } } }";
    let document = "mutation($t: String!, $c: String!, $s: UUID!, $u: String, $m: JSON) { addKnowledgeDocument(input: \
        {knowledgeSpaceId: $s, title: $t, content: $c, sourceUri: $u, metadata: $m}) { id } }";
    let passages = "query($s: UUID!, $f: Int, $a: Int) { knowledgeSpace(id: $s) { documents { passages(first: $f, afterOrdinal: $a) { id } } } }";
    let documents_page = "query($s: UUID!, $f: Int, $a: String) { knowledgeSpace(id: $s) { documentsConnection(first: $f, after: $a) { edges { cursor } } } }";
    let update = "mutation($id: UUID!, $input: UpdateKnowledgeDocumentInput!) { updateKnowledgeDocument(id: $id, input: $input) { id } }";
    let document_id = api
        .data(Some(&token), document, json!({ "s": space, "t": "t", "c": "c" }))
        .await?["addKnowledgeDocument"]["id"]
        .clone();
    let too_complex = "query($s: UUID!) { researchTasks(knowledgeSpaceId: $s, first: 100) { edges { node { \
        progressEvents(first: 100) { id payload } partialResults(first: 100) { id } } } } }";
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        ("negative first", tasks, json!({ "s": space, "first": -1 }), "BAD_USER_INPUT"),
        ("first over 100", tasks, json!({ "s": space, "first": 101 }), "BAD_USER_INPUT"),
        ("first over 100 on spaces", spaces, json!({ "first": 101 }), "BAD_USER_INPUT"),
        ("a foreign cursor", tasks, json!({ "s": space, "after": "not-a-cursor" }), "BAD_USER_INPUT"),
        ("negative afterSequence", events, json!({ "id": task["id"], "a": -1 }), "BAD_USER_INPUT"),
        ("journal first over 100", events, json!({ "id": task["id"], "f": 101 }), "BAD_USER_INPUT"),
        ("empty query", CREATE_TASK, task_input("query", json!("  ")), "BAD_USER_INPUT"),
        ("long query", CREATE_TASK, task_input("query", json!("q".repeat(4001))), "BAD_USER_INPUT"),
        ("topK 0", CREATE_TASK, task_input("topK", json!(0)), "BAD_USER_INPUT"),
        ("topK 101", CREATE_TASK, task_input("topK", json!(101)), "BAD_USER_INPUT"),
        ("negative budget", CREATE_TASK, task_input("budgetUsd", json!(-0.5)), "BAD_USER_INPUT"),
        ("limits not an object", CREATE_TASK, task_input("limits", json!([1])), "BAD_USER_INPUT"),
        ("metadata not an object", CREATE_TASK, task_input("metadata", json!("x")), "BAD_USER_INPUT"),
        ("limits over 16 KB", CREATE_TASK, task_input("limits", big_object.clone()), "BAD_USER_INPUT"),
        ("metadata over 16 KB", CREATE_TASK, task_input("metadata", big_object), "BAD_USER_INPUT"),
        ("long idempotency key", CREATE_TASK, task_input("idempotencyKey", json!("k".repeat(256))), "BAD_USER_INPUT"),
        ("empty idempotency key", CREATE_TASK, task_input("idempotencyKey", json!("")), "BAD_USER_INPUT"),
        ("unknown mode", CREATE_TASK, task_input("mode", json!("TURBO")), "BAD_USER_INPUT"),
        ("long space name", CREATE_SPACE, json!({ "name": "n".repeat(256) }), "BAD_USER_INPUT"),
        ("empty space name", CREATE_SPACE, json!({ "name": "" }), "BAD_USER_INPUT"),
        ("long title", document, json!({ "s": space, "t": "t".repeat(513), "c": "c" }), "BAD_USER_INPUT"),
        (
            "content over 5 MiB",
            document,
            json!({ "s": space, "t": "t", "c": "c".repeat(5 * 1024 * 1024 + 1) }),
            "BAD_USER_INPUT",
        ),
        ("blank content", document, json!({ "s": space, "t": "t", "c": " \n " }), "BAD_USER_INPUT"),
        (
            "long source URI",
            document,
            json!({ "s": space, "t": "t", "c": "c", "u": "u".repeat(2049) }),
            "BAD_USER_INPUT",
        ),
        (
            "document metadata not an object",
            document,
            json!({ "s": space, "t": "t", "c": "c", "m": [1] }),
            "BAD_USER_INPUT",
        ),
        (
            "unknown media type",
            "mutation($s: UUID!) { addKnowledgeDocument(input: {knowledgeSpaceId: $s, title: \"t\", content: \"c\", mediaType: TEXT_PDF}) { id } }",
            json!({ "s": space }),
            "BAD_USER_INPUT",
        ),
        ("passages first over 100", passages, json!({ "s": space, "f": 101 }), "BAD_USER_INPUT"),
        ("negative afterOrdinal", passages, json!({ "s": space, "a": -1 }), "BAD_USER_INPUT"),
        ("documents page over 100", documents_page, json!({ "s": space, "f": 101 }), "BAD_USER_INPUT"),
        ("a foreign documents cursor", documents_page, json!({ "s": space, "a": "nope" }), "BAD_USER_INPUT"),
        ("an update that changes nothing", update, json!({ "id": document_id, "input": {} }), "BAD_USER_INPUT"),
        (
            "an update to blank content",
            update,
            json!({ "id": document_id, "input": { "content": "" } }),
            "BAD_USER_INPUT",
        ),
        (
            "an update over 5 MiB",
            update,
            json!({ "id": document_id, "input": { "content": "é".repeat(2 * 1024 * 1024 + 512 * 1024 + 1) } }),
            "BAD_USER_INPUT",
        ),
        (
            "key expiring in the past",
            CREATE_KEY,
            json!({ "input": { "knowledgeSpaceId": space, "name": "k", "expiresAt": past } }),
            "BAD_USER_INPUT",
        ),
        (
            "long key name",
            CREATE_KEY,
            json!({ "input": { "knowledgeSpaceId": space, "name": "k".repeat(256) } }),
            "BAD_USER_INPUT",
        ),
        ("not a UUID", crate::api_support::READ_TASK, json!({ "id": "nope" }), "BAD_USER_INPUT"),
        ("too complex", too_complex, json!({ "s": space }), "TOO_COMPLEX"),
    ];
    for (what, query, variables, expected) in cases {
        let (status, body) = api.server.post(Some(&token), query, variables).await?;
        ensure!(status < 500, "{what}: status {status}: {body}");
        let code = kfs_tests::server::first_error_code(&body);
        ensure!(code.as_deref() == Some(expected), "{what}: expected {expected}, got {body}");
    }
    let resume_after = json!({ "id": task["id"], "v": null });
    let pause_later =
        PAUSE.replace("expectedRowVersion: $v)", "expectedRowVersion: $v, resumeAfter: \"2000-01-01T00:00:00Z\")");
    ensure!(api.code(Some(&token), &pause_later, resume_after).await? == "BAD_USER_INPUT");
    api.stop().await;
    Ok(())
}

/// `limits` is parsed at the edge: a documented key with the wrong type or out of range
/// and an unknown key are BAD_USER_INPUT naming the key (before, `{"deadline_ms": "soon"}`
/// was accepted and then silently ignored by the worker); `null` means the default.
async fn every_limits_key_is_typed_and_an_unknown_key_is_refused(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let create = |limits: Value| json!({ "input": { "knowledgeSpaceId": space, "query": "q", "limits": limits } });
    let refused = [
        (json!({ "deadline_ms": "soon" }), "deadline_ms"),
        (json!({ "deadline_ms": 999 }), "deadline_ms"),
        (json!({ "deadline_ms": 2_592_000_001_i64 }), "deadline_ms"),
        (json!({ "deadline_ms": 1500.5 }), "deadline_ms"),
        (json!({ "deadline_ms": [5000] }), "deadline_ms"),
        (json!({ "max_sub_queries": 0 }), "max_sub_queries"),
        (json!({ "max_sub_queries": "3" }), "max_sub_queries"),
        (json!({ "max_evidence": 101 }), "max_evidence"),
        (json!({ "max_evidence": false }), "max_evidence"),
        (json!({ "max_rounds": 0 }), "max_rounds"),
        (json!({ "max_rounds": 9 }), "max_rounds"),
        (json!({ "verify": "yes" }), "verify"),
        (json!({ "verify": 1 }), "verify"),
        (json!({ "approve_plan": "true" }), "approve_plan"),
        (json!({ "clarify": null, "approve_plan": 1 }), "approve_plan"),
        (json!({ "clarify": [true] }), "clarify"),
        (json!({ "input_timeout_ms": 59_999 }), "input_timeout_ms"),
        (json!({ "input_timeout_ms": 604_800_001 }), "input_timeout_ms"),
        (json!({ "input_timeout_ms": 60_000.5 }), "input_timeout_ms"),
        (json!({ "deadline": 60_000 }), "deadline"),
        (json!({ "max_sub_queries": 2, "colour": "red" }), "colour"),
    ];
    for (limits, key) in refused {
        let (status, body) = api.server.post(Some(&token), CREATE_TASK, create(limits.clone())).await?;
        ensure!(status < 500, "{limits}: status {status}: {body}");
        let code = kfs_tests::server::first_error_code(&body);
        ensure!(code.as_deref() == Some("BAD_USER_INPUT"), "{limits}: {body}");
        let message = body["errors"][0]["message"].as_str().unwrap_or_default();
        ensure!(message.contains(&format!("limits.{key}")), "{limits}: the message names the key: {message}");
    }
    let read = "query($id: UUID!) { researchTask(id: $id) { limits } }";
    let accepted = [
        (
            json!({ "deadline_ms": 60_000, "max_sub_queries": 3, "max_evidence": 5 }),
            json!({ "deadline_ms": 60_000, "max_sub_queries": 3, "max_evidence": 5 }),
        ),
        (json!({ "deadline_ms": null, "max_evidence": 1 }), json!({ "max_evidence": 1 })),
        (json!({ "max_rounds": 8, "verify": false }), json!({ "max_rounds": 8, "verify": false })),
        (
            json!({ "approve_plan": false, "clarify": false, "input_timeout_ms": 60_000 }),
            json!({ "approve_plan": false, "clarify": false, "input_timeout_ms": 60_000 }),
        ),
        (json!({}), json!({})),
    ];
    for (limits, stored) in accepted {
        let created = api.data(Some(&token), CREATE_TASK, create(limits.clone())).await?;
        let id = created["createResearchTask"]["id"].clone();
        let task = api.data(Some(&token), read, json!({ "id": id })).await?;
        ensure!(task["researchTask"]["limits"] == stored, "{limits}: {task}");
    }
    api.stop().await;
    Ok(())
}

/// GraphiQL's introspection query (graphql-js `getIntrospectionQuery`, nine `ofType` levels).
async fn the_graphiql_introspection_query_is_allowed(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let mut type_ref = String::from("kind name");
    for _ in 0..9 {
        type_ref = format!("kind name ofType {{ {type_ref} }}");
    }
    let query = format!(
        "query IntrospectionQuery {{ __schema {{ queryType {{ name }} mutationType {{ name }} subscriptionType {{ name }} \
         types {{ ...FullType }} directives {{ name description locations args {{ ...InputValue }} }} }} }} \
         fragment FullType on __Type {{ kind name description \
           fields(includeDeprecated: true) {{ name description args {{ ...InputValue }} type {{ ...TypeRef }} isDeprecated deprecationReason }} \
           inputFields {{ ...InputValue }} interfaces {{ ...TypeRef }} \
           enumValues(includeDeprecated: true) {{ name description isDeprecated deprecationReason }} possibleTypes {{ ...TypeRef }} }} \
         fragment InputValue on __InputValue {{ name description type {{ ...TypeRef }} defaultValue }} \
         fragment TypeRef on __Type {{ {type_ref} }}"
    );
    let data = api.data(None, &query, json!({})).await?;
    ensure!(data["__schema"]["queryType"]["name"] == "Query", "{data}");
    ensure!(data["__schema"]["subscriptionType"]["name"] == "Subscription", "{data}");
    api.stop().await;
    Ok(())
}
