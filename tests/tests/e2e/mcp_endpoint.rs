//! The `/mcp` endpoint with the official SDK clients (the TypeScript SDK from npm, the
//! Python SDK from PyPI) and with raw HTTP where the contract is about the wire: a task
//! created over MCP is an ordinary task (its channel `MCP`), every read goes through the
//! caller's grant, refusals carry GraphQL's codes, and the guard answers 401, 403 and 400
//! as the protocol and OAuth's protected resource metadata say.
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::{Value, json};

use crate::api_support::{Api, string_at};
use crate::http_contract::node_clients;
use crate::research_openai::{DOCUMENTS, space_with_documents};

pub fn tests() -> Vec<DbTest> {
    let python = db_tests![the_python_sdk_connects_lists_and_calls];
    let mut tests: Vec<DbTest> = python.into_iter().map(DbTest::needing_python_mcp).collect();
    tests.extend(db_tests![
        the_typescript_sdk_lists_the_tools_starts_research_and_reads_the_cited_answer,
        research_waits_for_the_answer_with_progress_and_search_and_fetch_stay_in_the_callers_spaces,
        tasks_are_ordinary_tasks_read_only_through_the_callers_grant,
        the_guard_answers_401_403_and_400_as_the_protocol_says,
        the_tasks_extension_runs_research_as_a_task_that_asks_for_its_plan,
        an_agent_that_calls_in_a_burst_is_held_by_the_callers_rate_and_counted,
        research_calls_waiting_at_once_are_bounded_per_caller_and_end_with_their_task,
        an_identity_providers_token_may_name_this_resource_as_its_audience,
        large_answers_are_cut_or_refused_and_search_takes_exactly_the_filters_tasks_take,
    ]);
    tests
}

/// The server's MCP URL.
fn mcp_url(api: &Api) -> String {
    format!("{}/mcp", api.server.server.base_url())
}

/// Runs the TypeScript SDK client with `script`; returns its JSON lines.
async fn typescript(api: &Api, bearer: &str, script: Value) -> anyhow::Result<Vec<Value>> {
    let dir = node_clients()?;
    let run = tokio::process::Command::new("node")
        .arg(dir.join("node/mcp-research.mjs"))
        .args([mcp_url(api), bearer.to_owned(), script.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run).await.context("the MCP client hung")??;
    ensure!(
        output.status.success(),
        "the TypeScript MCP client failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).with_context(|| format!("node printed {line}")))
        .collect()
}

/// The result of the line that called `tool` (the `n`-th such line).
fn call_result(lines: &[Value], tool: &str, n: usize) -> anyhow::Result<Value> {
    lines
        .iter()
        .filter(|line| line["call"] == json!(tool))
        .nth(n)
        .cloned()
        .with_context(|| format!("no call {n} of {tool} in {lines:#?}"))
}

/// A raw JSON-RPC POST to `/mcp`; returns the status, headers and body text.
async fn post(
    api: &Api,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<(u16, reqwest::header::HeaderMap, String)> {
    let mut request = api
        .server
        .http
        .post(mcp_url(api))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("mcp-protocol-version")) {
        request = request.header("mcp-protocol-version", "2025-11-25");
    }
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Ok((status, headers, response.text().await?))
}

/// A `tools/call` over raw HTTP; returns the JSON-RPC response.
pub async fn call(api: &Api, bearer: &str, tool: &str, arguments: Value) -> anyhow::Result<Value> {
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": { "name": tool, "arguments": arguments } });
    let (status, _, text) = post(api, Some(bearer), &[], &body.to_string()).await?;
    ensure_eq!(status, 200, "{text}");
    serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))
}

/// A tool result's error text (empty when it did not fail).
fn error_text(response: &Value) -> String {
    if response["result"]["isError"] != json!(true) {
        return String::new();
    }
    response["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

async fn the_typescript_sdk_lists_the_tools_starts_research_and_reads_the_cited_answer(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.embedded_worker = true).await?;
    let (space, token) = space_with_documents(&api).await?;
    let script = json!([
        { "call": "list_spaces" },
        { "call": "start_research", "arguments": { "space_id": space, "question": "How do bees make honey?", "mode": "research" } },
        { "until": "get_research", "arguments": { "task_id": "$task" }, "stage": ["completed", "failed", "canceled"] },
    ]);
    let lines = typescript(&api, &token, script).await?;
    // Every tool listed with both schemas.
    let tools = lines.iter().find_map(|line| line["tools"].as_array()).context("no tools line")?;
    let names: Vec<&str> = tools.iter().filter_map(|tool| tool["name"].as_str()).collect();
    ensure_eq!(
        names,
        ["list_spaces", "start_research", "get_research", "cancel_research", "research", "search", "fetch"]
    );
    ensure!(
        tools.iter().all(|tool| tool["inputSchema"]["type"] == json!("object") && tool["outputSchema"].is_object()),
        "{tools:#?}"
    );
    let spaces = call_result(&lines, "list_spaces", 0)?;
    ensure_eq!(
        spaces["result"]["structuredContent"]["spaces"],
        json!([{ "id": space, "name": "alice's space", "role": "owner" }])
    );
    // The same result as JSON text beside the structured content.
    let text: Value = serde_json::from_str(spaces["result"]["content"][0]["text"].as_str().unwrap_or_default())?;
    ensure_eq!(text, spaces["result"]["structuredContent"]);
    let started = call_result(&lines, "start_research", 0)?;
    ensure_eq!(started["result"]["structuredContent"]["stage"], json!("queued"));
    let task = string_at(&started, "/result/structuredContent/task_id")?;
    let done = call_result(&lines, "get_research", 0)?["result"]["structuredContent"].clone();
    ensure_eq!(done["stage"], json!("completed"), "{done}");
    ensure!(done["rounds_done"].as_i64().is_some_and(|rounds| rounds >= 1), "{done}");
    // The citations are the trace's evidence, as GraphQL shows it to the same subject.
    let read =
        "query($id: UUID!) { researchTask(id: $id) { accessChannel answerTrace { answer evidence accessChannel } } }";
    let graphql = api.data(Some(&token), read, json!({ "id": task })).await?;
    let trace = &graphql["researchTask"]["answerTrace"];
    ensure_eq!(done["answer"], trace["answer"]);
    let evidence = trace["evidence"].as_array().cloned().unwrap_or_default();
    let citations = done["citations"].as_array().cloned().unwrap_or_default();
    ensure!(!citations.is_empty() && citations.len() == evidence.len(), "{citations:#?} / {evidence:#?}");
    for (citation, item) in citations.iter().zip(&evidence) {
        ensure_eq!(
            (
                &citation["n"],
                &citation["passage_id"],
                &citation["document_id"],
                &citation["char_start"],
                &citation["text"]
            ),
            (&item["citation"], &item["passage_id"], &item["document_id"], &item["char_start"], &item["text"])
        );
    }
    ensure_eq!(
        (&graphql["researchTask"]["accessChannel"], &trace["accessChannel"]),
        (&json!("MCP"), &json!("MCP")),
        "a JWT caller's task through /mcp is on the mcp channel"
    );
    api.stop().await;
    Ok(())
}

async fn research_waits_for_the_answer_with_progress_and_search_and_fetch_stay_in_the_callers_spaces(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.embedded_worker = true).await?;
    let (space, token) = space_with_documents(&api).await?;
    let script = json!([
        { "research": { "space_id": space, "question": "How do bees make honey?", "mode": "fast" } },
        { "call": "search", "arguments": { "query": "wax glands" } },
        { "call": "search", "arguments": { "query": "wax", "space_id": space } },
    ]);
    let lines = typescript(&api, &token, script).await?;
    let research = call_result(&lines, "research", 0)?;
    let progress = research["progress"].as_array().cloned().unwrap_or_default();
    ensure!(progress.len() >= 3, "a notification per stage: {progress:#?}");
    let task = string_at(&research, "/result/structuredContent/task_id")?;
    ensure!(
        progress[0]["message"].as_str().is_some_and(|message| message.contains(&task)),
        "the first progress message names the task: {progress:#?}"
    );
    let numbers: Vec<f64> = progress.iter().filter_map(|p| p["progress"].as_f64()).collect();
    ensure!(numbers.windows(2).all(|pair| pair[0] < pair[1]), "progress increases: {numbers:?}");
    let result = &research["result"]["structuredContent"];
    ensure_eq!(result["stage"], json!("completed"), "{research}");
    ensure!(result["answer"].as_str().is_some_and(|answer| answer.contains("[1]")), "{result}");

    // Search finds the wax passage in the caller's space, with a URL that answers fetch.
    let found = call_result(&lines, "search", 0)?["result"]["structuredContent"]["results"].clone();
    let first = found.as_array().and_then(|results| results.first()).cloned().context("no search result")?;
    ensure_eq!(first["title"], json!("Wax"), "{found}");
    ensure_eq!(call_result(&lines, "search", 1)?["result"]["structuredContent"]["results"][0]["id"], first["id"]);
    let fetched = call(&api, &token, "fetch", json!({ "id": first["id"] })).await?;
    let item = &fetched["result"]["structuredContent"];
    ensure_eq!((&item["title"], &item["text"]), (&json!("Wax"), &json!(DOCUMENTS[1].1)), "{fetched}");
    let url = item["url"].as_str().unwrap_or_default();
    ensure!(url.starts_with(&api.server.server.base_url()), "{url}");
    let over_http: Value = api.server.http.get(url).bearer_auth(&token).send().await?.json().await?;
    ensure_eq!(&over_http, item, "the item's URL answers the same fetch");
    let anonymous = api.server.http.get(url).send().await?.status().as_u16();
    ensure_eq!(anonymous, 401);

    // Another tenant's caller: the same ids answer as ids that do not exist.
    let stranger = kfs_tests::server::TestServer::token("mallory", "another-tenant");
    let random = uuid::Uuid::new_v4();
    for id in [first["id"].clone(), json!(random)] {
        let refused = call(&api, &stranger, "fetch", json!({ "id": id })).await?;
        ensure_eq!(error_text(&refused), "NOT_FOUND: not found", "{refused}");
    }
    let theirs = call(&api, &stranger, "search", json!({ "query": "wax glands" })).await?;
    ensure_eq!(theirs["result"]["structuredContent"]["results"], json!([]), "{theirs}");
    let other_space = call(&api, &stranger, "search", json!({ "query": "wax", "space_id": space })).await?;
    ensure_eq!(error_text(&other_space), "NOT_FOUND: not found");
    let fetched_by_stranger = api.server.http.get(url).bearer_auth(&stranger).send().await?.status().as_u16();
    ensure_eq!(fetched_by_stranger, 404);
    api.stop().await;
    Ok(())
}

async fn tasks_are_ordinary_tasks_read_only_through_the_callers_grant(db: TestDb) -> anyhow::Result<()> {
    // No worker: tasks stay where the test puts them.
    let api = Api::start(&db).await?;
    let (space, alice) = space_with_documents(&api).await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    let bob = api.token("bob");
    let started =
        call(&api, &alice, "start_research", json!({ "space_id": space, "question": "How do bees make honey?" }))
            .await?;
    let task = string_at(&started, "/result/structuredContent/task_id")?;
    let queued = call(&api, &alice, "get_research", json!({ "task_id": task })).await?;
    ensure_eq!(queued["result"]["structuredContent"]["stage"], json!("queued"), "{queued}");

    // Another subject of the same space, and a random id, get exactly the same answer.
    let random = uuid::Uuid::new_v4().to_string();
    for tool in ["get_research", "cancel_research"] {
        let theirs = call(&api, &bob, tool, json!({ "task_id": task })).await?;
        let missing = call(&api, &alice, tool, json!({ "task_id": random })).await?;
        ensure_eq!(error_text(&theirs), "NOT_FOUND: not found", "{theirs}");
        ensure_eq!(theirs["result"], missing["result"], "{tool}");
    }
    // Bad input: GraphQL's codes, as tool results a model can read.
    for (tool, arguments, needle) in [
        ("start_research", json!({ "space_id": space, "question": "" }), "query must not be empty"),
        ("start_research", json!({ "space_id": space, "question": "q", "mode": "thorough" }), "mode must be one of"),
        (
            "start_research",
            json!({ "space_id": space, "question": "q", "limits": { "max_rounds": 9 } }),
            "limits.max_rounds",
        ),
        ("start_research", json!({ "space_id": space, "question": "q", "colour": "red" }), "unknown field"),
        ("start_research", json!({ "space_id": space, "question": "x".repeat(4_001) }), "at most 4000"),
        ("get_research", json!({ "task_id": "not-a-uuid" }), "invalid arguments"),
        ("get_research", json!({}), "missing field"),
    ] {
        let refused = call(&api, &alice, tool, arguments.clone()).await?;
        let text = error_text(&refused);
        ensure!(text.starts_with("BAD_USER_INPUT: ") && text.contains(needle), "{arguments}: {refused}");
    }
    // Another space: NOT_FOUND, as for GraphQL.
    let elsewhere =
        call(&api, &alice, "start_research", json!({ "space_id": uuid::Uuid::new_v4(), "question": "q" })).await?;
    ensure_eq!(error_text(&elsewhere), "NOT_FOUND: not found");

    // Cancel twice: canceled both times, one event.
    for _ in 0..2 {
        let canceled = call(&api, &alice, "cancel_research", json!({ "task_id": task })).await?;
        ensure_eq!(canceled["result"]["structuredContent"], json!({ "task_id": task, "stage": "canceled" }));
    }
    let read = "query($id: UUID!) { researchTask(id: $id) { stage accessChannel rowVersion } }";
    let graphql = api.data(Some(&alice), read, json!({ "id": task })).await?;
    ensure_eq!(graphql["researchTask"]["stage"], json!("CANCELED"));
    ensure_eq!(graphql["researchTask"]["accessChannel"], json!("MCP"));

    // An API key's tasks keep service_api; a key revoked mid-session is refused at once.
    let (key_id, key) = api.key("alice", &space).await?;
    let by_key =
        call(&api, &key, "start_research", json!({ "space_id": space, "question": "How do bees make honey?" })).await?;
    let key_task = string_at(&by_key, "/result/structuredContent/task_id")?;
    let channel = api.data(Some(&key), read, json!({ "id": key_task })).await?;
    ensure_eq!(channel["researchTask"]["accessChannel"], json!("SERVICE_API"));
    api.data(Some(&alice), "mutation($id: UUID!) { revokeApiKey(id: $id) { id } }", json!({ "id": key_id })).await?;
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string();
    let (status, _, _) = post(&api, Some(&key), &[], &body).await?;
    ensure_eq!(status, 401, "a revoked key's next request");
    api.stop().await;
    Ok(())
}

async fn the_python_sdk_connects_lists_and_calls(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let (space, token) = space_with_documents(&api).await?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/mcp_client.py");
    let run = tokio::process::Command::new("python3")
        .arg(script)
        .args([mcp_url(&api), token.clone(), "list_spaces".to_owned(), "{}".to_owned()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run).await.context("the Python client hung")??;
    ensure!(
        output.status.success(),
        "the Python MCP client failed (pip install -r tests/python/requirements.txt): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Value> =
        String::from_utf8_lossy(&output.stdout).lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    ensure_eq!(lines[0]["connected"], json!("kfs-research"), "{lines:?}");
    ensure!(lines[1]["tools"].as_array().is_some_and(|tools| tools.len() == 7), "{lines:?}");
    ensure_eq!(lines[2]["isError"], json!(false), "{lines:?}");
    ensure_eq!(lines[2]["structuredContent"]["spaces"][0]["id"], json!(space), "{lines:?}");
    api.stop().await;
    Ok(())
}

async fn the_guard_answers_401_403_and_400_as_the_protocol_says(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let (space, token) = space_with_documents(&api).await?;
    let base = api.server.server.base_url();
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string();
    let challenge = format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");

    // No token, a bad token, a token in the query string: 401 with the challenge.
    for bearer in [None, Some("not-a-token"), Some("kfs_00000000000000000000000000000000_nope")] {
        let (status, headers, body) = post(&api, bearer, &[], &list).await?;
        ensure_eq!(status, 401, "{bearer:?}: {body}");
        ensure_eq!(headers.get("www-authenticate").and_then(|v| v.to_str().ok()), Some(challenge.as_str()));
        let error: Value = serde_json::from_str(&body)?;
        ensure!(error["error"]["message"].as_str().is_some_and(|m| m.starts_with("UNAUTHENTICATED")), "{body}");
    }
    let in_query =
        api.server.http.post(format!("{}?access_token={token}", mcp_url(&api))).body(list.clone()).send().await?;
    ensure_eq!(in_query.status().as_u16(), 401, "a token in the query string is ignored");

    // The protected resource metadata.
    let metadata: Value =
        api.server.http.get(format!("{base}/.well-known/oauth-protected-resource/mcp")).send().await?.json().await?;
    ensure_eq!(
        metadata,
        json!({
            "resource": format!("{base}/mcp"),
            "authorization_servers": [],
            "bearer_methods_supported": ["header"],
            "resource_name": "Knowledge-space research",
        })
    );

    // Audience binding: none or this resource is accepted, another is refused.
    let tenant = api.tenant.clone();
    let signed = |aud: Value| {
        let mut claims = json!({ "sub": "alice", "tenant": tenant, "exp": kfs_tests::server::chrono_now() + 600 });
        if !aud.is_null() {
            claims["aud"] = aud;
        }
        let key = jsonwebtoken::EncodingKey::from_secret(kfs_tests::server::TEST_JWT_SECRET.as_bytes());
        jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256), &claims, &key)
    };
    for (aud, expected) in [
        (Value::Null, 200),
        (json!(format!("{base}/mcp")), 200),
        (json!(["https://elsewhere.example", format!("{base}/mcp")]), 200),
        (json!("https://elsewhere.example/mcp"), 401),
        (json!(["kfs-api"]), 401),
        // An audience of a shape no JWT may have is refused, not read as none.
        (json!(42), 401),
        (json!({ "aud": format!("{base}/mcp") }), 401),
        (json!([format!("{base}/mcp"), 7]), 401),
    ] {
        let (status, _, body) = post(&api, Some(&signed(aud.clone())?), &[], &list).await?;
        ensure_eq!(status, expected, "aud {aud}: {body}");
    }

    // Origins: none, this server's own, or a configured one; any other is 403.
    let (status, _, body) = post(&api, Some(&token), &[("origin", "https://evil.example")], &list).await?;
    ensure_eq!(status, 403, "{body}");
    let (status, _, _) = post(&api, Some(&token), &[("origin", base.as_str())], &list).await?;
    ensure_eq!(status, 200);
    let (status, _, _) = post(&api, Some(&token), &[("host", "evil.example")], &list).await?;
    ensure_eq!(status, 403, "a Host other than the public URL's or loopback");

    // Malformed JSON and non-JSON-RPC bodies: 400 with a JSON-RPC error; an unknown tool
    // is a protocol error. The revisions served have no batches.
    let batch = format!("[{list},{list}]");
    for (body, code) in [
        ("{not json", -32700),
        ("[]", -32600),
        (batch.as_str(), -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":1}", -32600),
        ("42", -32600),
        // MCP's ids are strings or integers, and params are an object.
        ("{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"tools/list\"}", -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"tools/list\"}", -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"tools/list\"}", -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"tools/list\"}", -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":[]}", -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":\"x\"}", -32600),
    ] {
        let (status, _, text) = post(&api, Some(&token), &[], body).await?;
        ensure_eq!(status, 400, "{body}: {text}");
        let error: Value = serde_json::from_str(&text)?;
        ensure_eq!(error["error"]["code"], json!(code), "{body}: {text}");
    }
    // Stateless: no server-sent stream to GET and no session to DELETE.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = api.server.http.request(method.clone(), mcp_url(&api)).bearer_auth(&token).send().await?;
        ensure_eq!(response.status().as_u16(), 405, "{method}");
    }
    // A string no backend can store is refused before anything reads it (PostgreSQL would
    // answer a NUL with a server error).
    let nul = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": { "name": "start_research", "arguments": { "space_id": space, "question": "wax\u{0}glands" } } });
    let (status, _, text) = post(&api, Some(&token), &[], &nul.to_string()).await?;
    ensure_eq!(status, 400, "{text}");
    ensure!(text.contains("BAD_USER_INPUT") && text.contains("NUL"), "{text}");
    let unknown = call(&api, &token, "no_such_tool", json!({})).await?;
    ensure_eq!(unknown["error"]["code"], json!(-32602), "{unknown}");
    let limit = api.server.server.state.settings.body_limit();
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{{\"x\":\"{}\"}}}}",
        "x".repeat(limit)
    );
    let (status, _, _) = post(&api, Some(&token), &[], &huge).await?;
    ensure_eq!(status, 413, "an oversized body");
    api.stop().await;
    Ok(())
}

/// A 2026-07-28 request (stateless: the client's context in `_meta`, the method and name
/// in headers) from a client that declares the tasks extension.
async fn task_request(api: &Api, bearer: &str, method: &str, name: &str, mut params: Value) -> anyhow::Result<Value> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } },
    });
    let body = json!({ "jsonrpc": "2.0", "id": 9, "method": method, "params": params }).to_string();
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", method), ("mcp-name", name)];
    let (status, _, text) = post(api, Some(bearer), &headers, &body).await?;
    ensure_eq!(status, 200, "{method}: {text}");
    serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))
}

/// Polls `tasks/get` until the task's status is one of `statuses`.
async fn task_until(api: &Api, bearer: &str, id: &str, statuses: &[&str]) -> anyhow::Result<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = task_request(api, bearer, "tasks/get", id, json!({ "taskId": id })).await?;
        let status = got["result"]["status"].as_str().unwrap_or_default().to_owned();
        if statuses.contains(&status.as_str()) || got.get("error").is_some() {
            return Ok(got);
        }
        ensure!(std::time::Instant::now() < deadline, "task {id} stayed {status}: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn the_tasks_extension_runs_research_as_a_task_that_asks_for_its_plan(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.embedded_worker = true).await?;
    let (space, token) = space_with_documents(&api).await?;
    let arguments = json!({
        "space_id": space, "question": "How do bees make honey?", "mode": "research",
        "limits": { "approve_plan": true, "max_rounds": 1 },
    });
    let created =
        task_request(&api, &token, "tools/call", "research", json!({ "name": "research", "arguments": arguments }))
            .await?;
    ensure_eq!(
        (&created["result"]["resultType"], &created["result"]["status"]),
        (&json!("task"), &json!("working")),
        "{created}"
    );
    let id = string_at(&created, "/result/taskId")?;
    // The research task was committed before the answer: GraphQL reads it under that id.
    let read = "query($id: UUID!) { researchTask(id: $id) { id accessChannel } }";
    ensure_eq!(api.data(Some(&token), read, json!({ "id": id })).await?["researchTask"]["accessChannel"], json!("MCP"));

    // The plan waits for approval: input_required with an elicitation holding the plan.
    let waiting = task_until(&api, &token, &id, &["input_required", "completed", "failed"]).await?;
    ensure_eq!(waiting["result"]["status"], json!("input_required"), "{waiting}");
    let request = &waiting["result"]["inputRequests"]["plan_approval"];
    ensure_eq!(request["method"], json!("elicitation/create"), "{waiting}");
    ensure!(request["params"]["requestedSchema"]["properties"]["sub_queries"].is_object(), "{waiting}");
    // Another subject's view of the task is a random id's.
    let stranger = kfs_tests::server::TestServer::token("mallory", "another-tenant");
    let theirs = task_request(&api, &stranger, "tasks/get", &id, json!({ "taskId": id })).await?;
    let random = uuid::Uuid::new_v4().to_string();
    let missing = task_request(&api, &token, "tasks/get", &random, json!({ "taskId": random })).await?;
    ensure_eq!(theirs["error"], missing["error"], "{theirs}");
    ensure_eq!(theirs["error"]["message"], json!("NOT_FOUND: not found"));

    // The person edits the plan; round 1 searches exactly that, and the task completes.
    let responses =
        json!({ "plan_approval": { "action": "accept", "content": { "sub_queries": "wax glands\nnectar" } } });
    let updated =
        task_request(&api, &token, "tasks/update", &id, json!({ "taskId": id, "inputResponses": responses })).await?;
    ensure!(updated.get("error").is_none(), "{updated}");
    let done = task_until(&api, &token, &id, &["completed", "failed", "cancelled"]).await?;
    ensure_eq!(done["result"]["status"], json!("completed"), "{done}");
    let result = &done["result"]["result"]["structuredContent"];
    ensure!(result["answer"].as_str().is_some_and(|answer| answer.contains("[1]")), "{done}");
    let events = "query($id: UUID!) { researchTask(id: $id) { progressEvents(first: 50) { payload } } }";
    let journal = api.call(Some(&token), events, json!({ "id": id })).await?;
    let resumed = journal["data"]["researchTask"]["progressEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|event| event["payload"]["reason"] == json!("plan_approval") && event["payload"].get("edited").is_some())
        .cloned();
    ensure_eq!(
        resumed.map(|event| event["payload"]["plan"].clone()),
        Some(json!(["wax glands", "nectar"])),
        "{journal}"
    );

    // tasks/cancel cancels; a budget the caller set is a completed call with an error result.
    let arguments =
        json!({ "space_id": space, "question": "How do bees make honey?", "limits": { "approve_plan": true } });
    let second =
        task_request(&api, &token, "tools/call", "research", json!({ "name": "research", "arguments": arguments }))
            .await?;
    let second = string_at(&second, "/result/taskId")?;
    task_until(&api, &token, &second, &["input_required"]).await?;
    let canceled = task_request(&api, &token, "tasks/cancel", &second, json!({ "taskId": second })).await?;
    ensure!(canceled.get("error").is_none(), "{canceled}");
    ensure_eq!(task_until(&api, &token, &second, &["cancelled"]).await?["result"]["status"], json!("cancelled"));
    let arguments = json!({ "space_id": space, "question": "How do bees make honey?", "budget_usd": 0.000000001 });
    let poor =
        task_request(&api, &token, "tools/call", "research", json!({ "name": "research", "arguments": arguments }))
            .await?;
    let poor = string_at(&poor, "/result/taskId")?;
    let ended = task_until(&api, &token, &poor, &["completed", "failed"]).await?;
    ensure_eq!(
        (&ended["result"]["status"], &ended["result"]["result"]["isError"]),
        (&json!("completed"), &json!(true)),
        "{ended}"
    );
    api.stop().await;
    Ok(())
}

async fn an_agent_that_calls_in_a_burst_is_held_by_the_callers_rate_and_counted(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.rate_requests_per_second = Some(3)).await?;
    let token = api.token("alice");
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "list_spaces", "arguments": {} } })
        .to_string();
    // Twenty calls at once: the bucket's burst passes, the rest are 429 with Retry-After.
    let calls = (0..20).map(|_| post(&api, Some(&token), &[], &list));
    let answers = futures_util::future::join_all(calls).await;
    let mut limited = 0;
    for answer in answers {
        let (status, headers, body) = answer?;
        match status {
            200 => {}
            429 => {
                limited += 1;
                ensure!(headers.contains_key("retry-after"), "{body}");
                ensure!(body.contains("RATE_LIMITED"), "{body}");
            }
            other => anyhow::bail!("status {other}: {body}"),
        }
    }
    // At 3 a second, however slowly a loaded machine sends them, most are held.
    ensure!((10..20).contains(&limited), "{limited} of 20 were held");
    // The calls that ran are counted by tool and outcome; the metric exists at zero for
    // every tool before any call.
    let metrics = api.server.http.get(format!("{}/metrics", api.server.server.base_url())).send().await?.text().await?;
    let counted = |tool: &str, outcome: &str| {
        metrics.lines().any(|line| {
            line.starts_with("mcp_tool_calls_total{")
                && line.contains(&format!("tool=\"{tool}\""))
                && line.contains(&format!("outcome=\"{outcome}\""))
        })
    };
    ensure!(counted("list_spaces", "ok") && counted("fetch", "refused") && counted("research", "error"), "{metrics}");
    api.stop().await;
    Ok(())
}

async fn research_calls_waiting_at_once_are_bounded_per_caller_and_end_with_their_task(
    db: TestDb,
) -> anyhow::Result<()> {
    // No worker: every research call waits until its task ends.
    let api = Api::start(&db).await?;
    let (space, token) = space_with_documents(&api).await?;
    let arguments = json!({ "space_id": space, "question": "How do bees make honey?" });
    let mut waiting = Vec::new();
    for _ in 0..8 {
        let (server, token, arguments) = (api.server.server.base_url(), token.clone(), arguments.clone());
        let http = api.server.http.clone();
        waiting.push(tokio::spawn(async move {
            let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "research", "arguments": arguments } });
            let response = http
                .post(format!("{server}/mcp"))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-11-25")
                .body(body.to_string())
                .send()
                .await?;
            anyhow::Ok(response.text().await?)
        }));
    }
    let list = "query($s: UUID!) { researchTasks(knowledgeSpaceId: $s, first: 50) { edges { node { id } } } }";
    let ids = |data: Value| -> Vec<String> {
        data["researchTasks"]["edges"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|edge| edge["node"]["id"].as_str().map(str::to_owned))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let tasks = loop {
        let tasks = ids(api.data(Some(&token), list, json!({ "s": space })).await?);
        if tasks.len() == 8 {
            break tasks;
        }
        ensure!(std::time::Instant::now() < deadline, "{} tasks", tasks.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A ninth is held, and creates nothing.
    let ninth = call(&api, &token, "research", arguments.clone()).await?;
    ensure!(error_text(&ninth).starts_with("RATE_LIMITED: "), "{ninth}");
    ensure_eq!(ids(api.data(Some(&token), list, json!({ "s": space })).await?).len(), 8);
    // Canceling the tasks ends the calls, each with its task as it ended.
    for task in &tasks {
        call(&api, &token, "cancel_research", json!({ "task_id": task })).await?;
    }
    for handle in waiting {
        let text = tokio::time::timeout(Duration::from_secs(30), handle).await???;
        let answer: Value = serde_json::from_str(&text).with_context(|| text.clone())?;
        ensure_eq!(answer["result"]["structuredContent"]["stage"], json!("canceled"), "{text}");
    }
    // Clients that go away stop their waits, never their tasks: each task stays queued for
    // get_research to pick up, and each call's place is given back.
    let research = |timeout_ms: u64| {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "research", "arguments": arguments } });
        api.server
            .http
            .post(mcp_url(&api))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string())
            .timeout(Duration::from_millis(timeout_ms))
            .send()
    };
    for _ in 0..8 {
        ensure!(research(300).await.is_err(), "the call waits for its task");
    }
    let all = ids(api.data(Some(&token), list, json!({ "s": space })).await?);
    let abandoned: Vec<&String> = all.iter().filter(|id| !tasks.contains(id)).collect();
    ensure_eq!(abandoned.len(), 8);
    let kept = call(&api, &token, "get_research", json!({ "task_id": abandoned[0] })).await?;
    ensure_eq!(kept["result"]["structuredContent"]["stage"], json!("queued"), "{kept}");
    // A ninth call waits (its place was free) rather than being refused at once.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match research(500).await {
            Err(_) => break,
            Ok(response) => {
                let text = response.text().await?;
                ensure!(text.contains("RATE_LIMITED"), "{text}");
                ensure!(std::time::Instant::now() < deadline, "the abandoned calls kept their places");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    // Their places are free again.
    let again = call(&api, &token, "start_research", arguments).await?;
    ensure!(error_text(&again).is_empty(), "{again}");
    api.stop().await;
    Ok(())
}

async fn an_identity_providers_token_may_name_this_resource_as_its_audience(db: TestDb) -> anyhow::Result<()> {
    use kfs_tests::jwks_server::{JwksServer, TestKey};
    let provider = JwksServer::start(&[TestKey::RsaA]).await?;
    let issuer = api::auth::IssuerSettings {
        issuer: provider.issuer(),
        audience: vec!["kfs".to_owned()],
        jwks_url: provider.jwks_url(),
        algorithms: vec!["RS256".to_owned()],
        subject_claim: "sub".to_owned(),
        tenant_claim: "tenant".to_owned(),
        channel_claim: "channel".to_owned(),
    };
    let server = kfs_tests::server::TestServer::start_with(&db.url, move |settings| {
        settings.jwt_issuers = vec![issuer];
    })
    .await?;
    let api = Api { server, tenant: format!("tenant-{}", uuid::Uuid::new_v4().simple()) };
    let base = api.server.server.base_url();
    let metadata: Value =
        api.server.http.get(format!("{base}/.well-known/oauth-protected-resource/mcp")).send().await?.json().await?;
    ensure_eq!(metadata["authorization_servers"], json!([provider.issuer()]));
    let mut claims = provider.claims("user-1", &api.tenant);
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string();
    for (aud, mcp, graphql) in [
        (json!("kfs"), 200, true),
        (json!(format!("{base}/mcp")), 200, false),
        (json!(["https://elsewhere.example", format!("{base}/mcp")]), 200, false),
        (json!("https://elsewhere.example"), 401, false),
    ] {
        claims["aud"] = aud.clone();
        let token = TestKey::RsaA.sign(&claims)?;
        let (status, _, body) = post(&api, Some(&token), &[], &list).await?;
        ensure_eq!(status, mcp, "aud {aud} at /mcp: {body}");
        let (_, body) = api.server.post(Some(&token), "{ viewer { subjectId } }", json!({})).await?;
        ensure_eq!(body["data"]["viewer"]["subjectId"] == json!("user-1"), graphql, "aud {aud} at /graphql: {body}");
    }
    api.stop().await;
    Ok(())
}

async fn large_answers_are_cut_or_refused_and_search_takes_exactly_the_filters_tasks_take(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.max_response_bytes = 4 << 20).await?;
    let (space, token) = space_with_documents(&api).await?;
    let add = |title: &str, content: String| json!({ "input": { "knowledgeSpaceId": space, "title": title, "content": content, "mediaType": "TEXT_PLAIN" } });
    let long = api.data(Some(&token), crate::knowledge_documents::ADD, add("Long", "tide ".repeat(400_000))).await?;
    let long = string_at(&long, "/addKnowledgeDocument/id")?;
    // A megabyte of control characters: JSON writes each as six bytes, twice per result.
    let escaped =
        api.data(Some(&token), crate::knowledge_documents::ADD, add("Escaped", "\u{1}".repeat(1 << 20))).await?;
    let escaped = string_at(&escaped, "/addKnowledgeDocument/id")?;

    // A long document is cut, and says so.
    let fetched = call(&api, &token, "fetch", json!({ "id": long })).await?;
    let item = &fetched["result"]["structuredContent"];
    ensure_eq!(item["text"].as_str().map(str::len), Some(1 << 20));
    ensure_eq!((&item["metadata"]["truncated"], &item["metadata"]["text_bytes"]), (&json!(true), &json!(2_000_000)));
    // A result past KFS_MAX_RESPONSE_BYTES is refused as GraphQL refuses it.
    let refused = call(&api, &token, "fetch", json!({ "id": escaped })).await?;
    ensure!(error_text(&refused).starts_with("TOO_COMPLEX"), "{refused}");
    let over_http =
        api.server.http.get(format!("{}/items/{escaped}", mcp_url(&api))).bearer_auth(&token).send().await?;
    ensure_eq!(over_http.status().as_u16(), 413);

    // The largest metadata filter the limits allow, past 16 KiB serialized: search refuses
    // it as createResearchTask does, with the same code.
    let keys: serde_json::Map<String, Value> = (0..32)
        .map(|key| (format!("key{key}"), json!((0..100).map(|value| format!("v{value}")).collect::<Vec<_>>())))
        .collect();
    let filters = json!({ "metadata": keys });
    let searched = call(&api, &token, "search", json!({ "query": "wax", "filters": filters })).await?;
    ensure!(error_text(&searched).starts_with("BAD_USER_INPUT"), "{searched}");
    let create = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }";
    let input = json!({ "knowledgeSpaceId": space, "query": "wax", "filters": filters });
    ensure_eq!(api.code(Some(&token), create, json!({ "input": input })).await?, "BAD_USER_INPUT");
    // One within the limits is taken by both.
    let small = json!({ "metadata": { "key0": ["v1", "v2"] } });
    let searched = call(&api, &token, "search", json!({ "query": "wax", "filters": small })).await?;
    ensure!(error_text(&searched).is_empty(), "{searched}");
    api.stop().await;
    Ok(())
}
