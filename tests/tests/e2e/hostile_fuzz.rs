//! A property test over the whole request path, against the `api` binary in a process of
//! its own: for a bounded time (`KFS_FUZZ_SECONDS`, default 6 per database) it sends
//! random and adversarial GraphQL documents (valid operations of this schema, mutated:
//! spans deleted, duplicated or wrapped in brackets, hostile tokens and fragment chains
//! spliced in), random variables (wrong types, huge and deep values, NUL, lone
//! surrogates) over HTTP POST and GET, and random WebSocket message sequences. It holds
//! that the process never panics or dies, never answers 5xx or INTERNAL_SERVER_ERROR,
//! closes WebSockets only with a protocol close code, and keeps answering `/healthz`.
//! One request in five is the `limits` mode: a task created with random `limits` is
//! accepted exactly when the documented keys and ranges say so, and refused naming a key.
//! The seed is printed; `KFS_FUZZ_SEED` replays a run.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures_util::{SinkExt as _, StreamExt as _};
use kfs_tests::process::{ApiProcess, Binaries, api_command};
use kfs_tests::server::{GraphqlClient, TestServer};
use kfs_tests::{DbTest, TestDb, db_tests};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom as _;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

pub fn tests() -> Vec<DbTest> {
    db_tests![random_and_adversarial_requests_never_crash_the_server_or_get_a_server_error]
}

/// Codes a client may see; INTERNAL_SERVER_ERROR is a bug.
const CODES: [&str; 6] = ["UNAUTHENTICATED", "FORBIDDEN", "NOT_FOUND", "BAD_USER_INPUT", "CONFLICT", "TOO_COMPLEX"];
/// Close codes the server may end a WebSocket with.
const CLOSE_CODES: [u16; 10] = [1000, 1001, 1009, 1013, 4400, 4401, 4403, 4408, 4409, 4429];

/// Valid operations of this schema, the starting points of mutation.
const CORPUS: &[&str] = &[
    "{ viewer { tenantId subjectId channel apiKeyKnowledgeSpaceId } }",
    "query($s: UUID!) { knowledgeSpace(id: $s) { id name viewerRole documents(first: 5) { id title content } members { subjectId role } apiKeys { id revision } } }",
    "query($s: UUID!, $f: Int, $a: String) { researchTasks(knowledgeSpaceId: $s, first: $f, after: $a, stages: [QUEUED, PAUSED]) { edges { cursor node { id stage cost limits progressEvents(first: 3) { sequence payload } partialResults { sequence } answerTrace { answer evidence } } } pageInfo { hasNextPage } } }",
    "query($t: UUID!) { researchTask(id: $t) { id stage rowVersion progressEvents(afterSequence: 0, first: 10) { sequence eventType } } }",
    "mutation($s: UUID!, $q: String!, $l: JSON, $m: JSON, $k: String) { createResearchTask(input: {knowledgeSpaceId: $s, query: $q, limits: $l, metadata: $m, idempotencyKey: $k, topK: 3, budgetUsd: 0.5, mode: FAST}) { id stage } }",
    "mutation($n: String!) { createKnowledgeSpace(input: {name: $n}) { id name } }",
    "mutation($s: UUID!, $t: String!, $c: String!) { addKnowledgeDocument(input: {knowledgeSpaceId: $s, title: $t, content: $c}) { id } }",
    "mutation($t: UUID!, $v: Int) { cancelResearchTask(id: $t, expectedRowVersion: $v) { id stage } }",
    "mutation($t: UUID!, $v: Int) { pauseResearchTask(id: $t, expectedRowVersion: $v, resumeAfter: \"2999-01-01T00:00:00Z\") { id } }",
    "mutation($t: UUID!) { resumeResearchTask(id: $t) { id } }",
    "mutation($s: UUID!, $x: String!) { addKnowledgeSpaceMember(input: {knowledgeSpaceId: $s, subjectId: $x, role: VIEWER}) { revision } }",
    "mutation($s: UUID!, $n: String!) { createApiKey(input: {knowledgeSpaceId: $s, name: $n}) { secret apiKey { id } } }",
    "mutation($t: UUID!) { revokeApiKey(id: $t) { id } }",
    "subscription($t: UUID!, $a: Int) { researchTaskProgress(taskId: $t, afterSequence: $a) { sequence } }",
    "query { __schema { types { name kind fields { name args { name type { name kind ofType { name } } } } } } }",
    "query Q($s: UUID!) { ...A } fragment A on Query { viewer { ...B } knowledgeSpace(id: $s) { ...C } } fragment B on Viewer { subjectId } fragment C on KnowledgeSpace { id }",
    "query { a: viewer { subjectId } b: viewer { tenantId } __typename }",
];

/// Tokens spliced into documents, chosen for what they do to lexers and parsers.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "...",
    ":",
    "$",
    "@",
    "!",
    "=",
    "|",
    "&",
    "\"",
    "\"\"\"",
    "#",
    "\n",
    ",",
    "fragment F on Query { __typename }",
    "...F",
    "on",
    "query",
    "mutation",
    "subscription",
    "__typename",
    "0",
    "-1",
    "1e999",
    "9999999999999999999999",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\\u{0}\"",
    "@skip(if: true)",
    "@include(if: $x)",
    "@deprecated",
    "\u{0}",
    "\u{feff}",
    "é",
    "𝄞",
    "\\",
    "$s",
    "null",
    "true",
    "[[[[",
    "]]]]",
    "{{{{",
    "}}}}",
];

/// A random document: a corpus entry, mutated a few times.
fn document(rng: &mut StdRng) -> String {
    if rng.random_ratio(1, 30) {
        return String::from_utf8_lossy(&(0..rng.random_range(0..200)).map(|_| rng.random::<u8>()).collect::<Vec<_>>())
            .into_owned();
    }
    let mut text = (*CORPUS.choose(rng).unwrap_or(&CORPUS[0])).to_owned();
    for _ in 0..rng.random_range(0..5) {
        let at = boundary(&text, rng.random_range(0..=text.len()));
        match rng.random_range(0..8) {
            0 => {
                let end = boundary(&text, rng.random_range(at..=text.len()));
                text.replace_range(at..end, "");
            }
            1 => {
                let end = boundary(&text, rng.random_range(at..=text.len().min(at + 200)));
                let span = text[at..end].to_owned();
                text.insert_str(at, &span.repeat(rng.random_range(1..20)));
            }
            2 => {
                let depth = rng.random_range(1..200);
                text = format!("{}{text}{}", "{".repeat(depth), "}".repeat(depth));
            }
            3 => text.push_str(&kfs_tests::hostile::unused_fragment_chain(rng.random_range(1..400)).replacen(
                "query{__typename}",
                "",
                1,
            )),
            4 => text.push_str(&kfs_tests::hostile::fragment_fan_out(rng.random_range(1..25)).replacen(
                "query{...F0}",
                "",
                1,
            )),
            5 => text.truncate(at),
            _ => {
                let token = TOKENS.choose(rng).copied().unwrap_or("{");
                text.insert_str(at, &format!(" {token} "));
            }
        }
    }
    text
}

/// The nearest character boundary at or before `at`.
fn boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A random JSON value, up to `depth` levels; the real ids some of the time.
fn value(rng: &mut StdRng, depth: usize, ids: &[String]) -> Value {
    match rng.random_range(0..12) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(
            *[0i64, -1, 1, 3, 100, 101, i64::from(i32::MAX), i64::from(i32::MAX) + 1, 1 << 53, i64::MIN]
                .choose(rng)
                .unwrap_or(&0)
        ),
        3 => json!(*[0.5f64, -0.0, 1e300, f64::MIN_POSITIVE, 3.25].choose(rng).unwrap_or(&0.5)),
        4 => json!(
            [
                "",
                "a\u{0}b",
                "é𝄞",
                "  ",
                "x".repeat(5_000).as_str(),
                "kfs_00000000000000000000000000000000_ab",
                "2000-01-01T00:00:00Z"
            ]
            .choose(rng)
            .copied()
            .unwrap_or("")
        ),
        5 | 6 => json!(ids.choose(rng).cloned().unwrap_or_default()),
        7 => json!(Uuid::new_v4()),
        8 if depth > 0 => Value::Array((0..rng.random_range(0..4)).map(|_| value(rng, depth - 1, ids)).collect()),
        9 if depth > 0 => {
            let keys = ["a", "b", "max_sub_queries", "deadline_ms", "\u{0}", "é"];
            Value::Object(
                (0..rng.random_range(0..4))
                    .map(|_| ((*keys.choose(rng).unwrap_or(&"a")).to_owned(), value(rng, depth - 1, ids)))
                    .collect(),
            )
        }
        _ => json!(format!("word {}", rng.random::<u32>())),
    }
}

/// Variables for a document: its usual names, sometimes an extra, sometimes not a map.
fn variables(rng: &mut StdRng, ids: &[String]) -> String {
    match rng.random_range(0..20) {
        0 => return format!("{{\"s\":{}1{}}}", "[".repeat(200), "]".repeat(200)),
        1 => return "[1,2,3]".to_owned(),
        2 => return "\"not a map\"".to_owned(),
        _ => {}
    }
    let mut map = serde_json::Map::new();
    for name in ["s", "t", "q", "l", "m", "k", "n", "c", "x", "f", "a", "v"] {
        if rng.random_ratio(3, 4) {
            map.insert(name.to_owned(), value(rng, 4, ids));
        }
    }
    Value::Object(map).to_string()
}

/// The documented `limits` keys and their ranges: the oracle the limits mode holds the
/// server to (written from the schema's description, not from the server's parser).
const LIMIT_RANGES: [(&str, i64, i64); 5] = [
    ("max_sub_queries", 1, 16),
    ("max_evidence", 1, 100),
    ("deadline_ms", 1_000, 2_592_000_000),
    ("max_rounds", 1, 8),
    ("input_timeout_ms", 60_000, 604_800_000),
];

/// The documented `limits` keys that take true or false.
const BOOL_LIMITS: [&str; 3] = ["verify", "approve_plan", "clarify"];

/// A random `limits` object: documented keys (integer and true-or-false ones), near-misses
/// of them and others, with values at and around each range's bounds, of every JSON type,
/// or null.
fn limits(rng: &mut StdRng) -> Value {
    let mut object = serde_json::Map::new();
    for _ in 0..rng.random_range(0..4) {
        let (key, low, high) = *LIMIT_RANGES.choose(rng).unwrap_or(&LIMIT_RANGES[0]);
        let key = match rng.random_range(0..9) {
            0 => format!("{key}s"),
            1 => key.to_uppercase(),
            2 => ["", "verified", "max_round", "deadline ms", "approve", "input_timeout"]
                .choose(rng)
                .copied()
                .unwrap_or("")
                .to_owned(),
            3 => BOOL_LIMITS.choose(rng).copied().unwrap_or("verify").to_owned(),
            _ => key.to_owned(),
        };
        let value = match rng.random_range(0..10) {
            0 => Value::Null,
            1 => json!(low - 1),
            2 => json!(high + 1),
            3 => json!(low as f64 + 0.5),
            4 => json!(low.to_string()),
            5 => json!(rng.random_bool(0.5)),
            6 => json!([low]),
            7 => json!(i64::MIN),
            _ => json!(rng.random_range(low..=high)),
        };
        object.insert(key, value);
    }
    Value::Object(object)
}

/// What the oracle expects of `limits`: `Ok(stored)` (the object without its nulls) or
/// `Err(bad keys)`, any of which the refusal may name.
fn expected_limits(limits: &Value) -> Result<Value, Vec<String>> {
    let mut stored = serde_json::Map::new();
    let mut bad = Vec::new();
    for (key, value) in limits.as_object().into_iter().flatten() {
        if BOOL_LIMITS.contains(&key.as_str()) {
            match value {
                Value::Null => {}
                Value::Bool(_) => {
                    stored.insert(key.clone(), value.clone());
                }
                _ => bad.push(key.clone()),
            }
            continue;
        }
        let range = LIMIT_RANGES.iter().find(|(name, _, _)| name == key);
        match (range, value) {
            (Some(_), Value::Null) => {}
            (Some((_, low, high)), value) if value.as_i64().is_some_and(|n| (*low..=*high).contains(&n)) => {
                stored.insert(key.clone(), value.clone());
            }
            _ => bad.push(key.clone()),
        }
    }
    if bad.is_empty() { Ok(Value::Object(stored)) } else { Err(bad) }
}

/// Creates a task with random `limits` and holds the answer to the oracle: accepted exactly
/// when every key is documented and its value an integer in range, stored without its
/// nulls; refused with BAD_USER_INPUT naming an offending key otherwise.
async fn one_limits_request(
    rng: &mut StdRng,
    client: &GraphqlClient,
    space: &str,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let limits = limits(rng);
    let create = "mutation($s: UUID!, $l: JSON) { createResearchTask(input: {knowledgeSpaceId: $s, query: \"fuzz\", limits: $l}) { id limits } }";
    let answer = client.call(create, json!({ "s": space, "l": limits })).await?;
    tally.requests += 1;
    match expected_limits(&limits) {
        Ok(stored) => {
            let task = &answer["data"]["createResearchTask"];
            ensure!(task["limits"] == stored, "{limits} should be accepted as {stored}: {answer}");
            *tally.codes.entry("limits accepted".to_owned()).or_default() += 1;
        }
        Err(bad) => {
            let code = answer.pointer("/errors/0/extensions/code").and_then(Value::as_str);
            ensure!(code == Some("BAD_USER_INPUT"), "{limits} should be refused (bad: {bad:?}): {answer}");
            let message = answer.pointer("/errors/0/message").and_then(Value::as_str).unwrap_or_default();
            ensure!(
                bad.iter().any(|key| message.contains(&format!("limits.{key}"))),
                "the refusal of {limits} names none of {bad:?}: {message}"
            );
            *tally.codes.entry("limits refused".to_owned()).or_default() += 1;
        }
    }
    Ok(())
}

/// What the run saw, for the closing line.
#[derive(Default)]
struct Tally {
    statuses: BTreeMap<u16, usize>,
    codes: BTreeMap<String, usize>,
    closes: BTreeMap<String, usize>,
    requests: usize,
    sessions: usize,
}

/// Sends one random HTTP request and checks the answer.
async fn one_request(
    rng: &mut StdRng,
    http: &reqwest::Client,
    url: &str,
    token: &str,
    ids: &[String],
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let query = document(rng);
    let vars = variables(rng, ids);
    let bearer = match rng.random_range(0..10) {
        0 => String::new(),
        1 => "Bearer not-a-token".to_owned(),
        _ => format!("Bearer {token}"),
    };
    let accept = if rng.random_bool(0.5) { "application/graphql-response+json" } else { "application/json" };
    let request = match rng.random_range(0..10) {
        0 => http.get(url).query(&[("query", query.as_str()), ("variables", vars.as_str())]),
        1 => http.post(url).header("content-type", "text/plain").body(query.clone()),
        2 => http
            .post(url)
            .header("content-type", "application/json")
            .body(format!("{{\"query\":{}", serde_json::to_string(&query)?)),
        _ => http
            .post(url)
            .header("content-type", "application/json")
            .body(format!("{{\"query\":{},\"variables\":{vars}}}", serde_json::to_string(&query)?)),
    };
    let response = request
        .header("accept", accept)
        .header("authorization", bearer)
        .timeout(Duration::from_secs(30))
        .send()
        .await?;
    let status = response.status().as_u16();
    *tally.statuses.entry(status).or_default() += 1;
    tally.requests += 1;
    let text = response.text().await?;
    ensure!(status < 500, "status {status} for {query:?} with {vars}: {text}");
    let body: Value = serde_json::from_str(&text)
        .with_context(|| format!("a body that is not JSON ({status}) for {query:?}: {text}"))?;
    for error in body["errors"].as_array().into_iter().flatten() {
        let code = error
            .pointer("/extensions/code")
            .and_then(Value::as_str)
            .with_context(|| format!("an error without a code for {query:?}: {error}"))?;
        ensure!(CODES.contains(&code), "{code} for {query:?} with {vars}: {error}");
        *tally.codes.entry(code.to_owned()).or_default() += 1;
    }
    Ok(())
}

/// One random WebSocket session: a random sequence of messages, then everything the
/// server says until it closes or goes quiet.
async fn one_session(
    rng: &mut StdRng,
    ws_url: &str,
    token: &str,
    ids: &[String],
    tally: &mut Tally,
) -> anyhow::Result<()> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let protocol = if rng.random_bool(0.8) { "graphql-transport-ws" } else { "graphql-ws" };
    let mut request = ws_url.into_client_request()?;
    request.headers_mut().insert("sec-websocket-protocol", protocol.parse()?);
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.context("opening a WebSocket")?;
    tally.sessions += 1;
    let mut sent = Vec::new();
    for _ in 0..rng.random_range(1..8) {
        let id = format!("{}", rng.random_range(0..3));
        let message = match rng.random_range(0..12) {
            0..=2 => Message::text(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } }).to_string()),
            3 => Message::text(json!({ "type": "connection_init", "payload": value(rng, 3, ids) }).to_string()),
            4..=6 => {
                let kind = if protocol == "graphql-ws" { "start" } else { "subscribe" };
                let payload = format!("{{\"query\":{},\"variables\":{}}}", serde_json::to_string(&document(rng))?, variables(rng, ids));
                Message::text(format!("{{\"type\":\"{kind}\",\"id\":\"{id}\",\"payload\":{payload}}}"))
            }
            7 => Message::text(json!({ "type": if protocol == "graphql-ws" { "stop" } else { "complete" }, "id": id }).to_string()),
            8 => Message::text(json!({ "type": *["ping", "pong", "ka", "bogus", "connection_terminate"].choose(rng).unwrap_or(&"ping") }).to_string()),
            9 => Message::text(String::from_utf8_lossy(&(0..rng.random_range(0..64)).map(|_| rng.random::<u8>()).collect::<Vec<_>>()).into_owned()),
            10 => Message::binary(vec![0u8; rng.random_range(0..16)]),
            _ => Message::text("x".repeat(if rng.random_bool(0.2) { 70 * 1024 } else { 100 })),
        };
        sent.push(message.to_string().chars().take(120).collect::<String>());
        if socket.send(message).await.is_err() {
            break;
        }
    }
    let quiet = Duration::from_millis(300);
    for _ in 0..200 {
        match tokio::time::timeout(quiet, socket.next()).await {
            Err(_) => break,
            Ok(None) => bail!("the connection ended without a close frame after {sent:?}"),
            Ok(Some(Err(error))) => bail!("the connection failed ({error}) after {sent:?}"),
            Ok(Some(Ok(Message::Close(frame)))) => {
                let code = frame.as_ref().map(|frame| u16::from(frame.code));
                ensure!(code.is_some_and(|code| CLOSE_CODES.contains(&code)), "closed with {code:?} after {sent:?}");
                *tally.closes.entry(format!("{}", code.unwrap_or_default())).or_default() += 1;
                return Ok(());
            }
            Ok(Some(Ok(Message::Text(text)))) => {
                let message: Value =
                    serde_json::from_str(text.as_str()).with_context(|| format!("a frame that is not JSON: {text}"))?;
                let kind = message["type"].as_str().unwrap_or_default();
                ensure!(
                    ["connection_ack", "ping", "pong", "ka", "next", "data", "error", "complete"].contains(&kind),
                    "unexpected {message}"
                );
                let payload = &message["payload"];
                let errors =
                    if kind == "error" && payload.is_array() { payload.clone() } else { payload["errors"].clone() };
                for error in errors.as_array().into_iter().flatten() {
                    let code = error.pointer("/extensions/code").and_then(Value::as_str).unwrap_or("none");
                    ensure!(CODES.contains(&code), "{code} in {message} after {sent:?}");
                }
            }
            Ok(Some(Ok(_))) => {}
        }
    }
    *tally.closes.entry("open".to_owned()).or_default() += 1;
    Ok(())
}

async fn random_and_adversarial_requests_never_crash_the_server_or_get_a_server_error(
    db: TestDb,
) -> anyhow::Result<()> {
    let seed =
        std::env::var("KFS_FUZZ_SEED").ok().and_then(|seed| seed.parse().ok()).unwrap_or_else(rand::random::<u64>);
    let seconds = std::env::var("KFS_FUZZ_SECONDS").ok().and_then(|seconds| seconds.parse().ok()).unwrap_or(6u64);
    let binaries = Binaries::build().await?;
    let mut api = ApiProcess::start(api_command(&binaries.api, &db.url)).await?;
    let tenant = format!("tenant-{}", Uuid::new_v4().simple());
    let token = TestServer::token("alice", &tenant);
    let client = GraphqlClient::new(api.graphql_url(), token.clone());
    let space = client.run("mutation { createKnowledgeSpace(input: {name: \"fuzz\"}) { id } }", json!({})).await?;
    let space = space.pointer("/createKnowledgeSpace/id").and_then(Value::as_str).context("no space")?.to_owned();
    let task = client
        .run(
            "mutation($s: UUID!) { createResearchTask(input: {knowledgeSpaceId: $s, query: \"fuzz\"}) { id } }",
            json!({ "s": space }),
        )
        .await?;
    let task = task.pointer("/createResearchTask/id").and_then(Value::as_str).context("no task")?.to_owned();
    let ids = vec![space, task];

    eprintln!("hostile_fuzz ({}): seed {seed} (KFS_FUZZ_SEED={seed} replays it), {seconds} s", db.backend.name());
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::new();
    let (url, ws_url, healthz) = (api.graphql_url(), api.ws_url(), format!("http://{}/healthz", api.addr));
    let mut tally = Tally::default();
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut round = 0usize;
    while Instant::now() < until {
        round += 1;
        let outcome = if round.is_multiple_of(8) {
            one_session(&mut rng, &ws_url, &token, &ids, &mut tally).await
        } else if round.is_multiple_of(5) {
            one_limits_request(&mut rng, &client, &ids[0], &mut tally).await
        } else {
            one_request(&mut rng, &http, &url, &token, &ids, &mut tally).await
        };
        outcome.with_context(|| format!("round {round} of seed {seed}"))?;
        if round.is_multiple_of(25) {
            let health = tokio::time::timeout(Duration::from_secs(10), http.get(&healthz).send())
                .await
                .context("/healthz stopped answering")??;
            ensure!(health.status().is_success(), "/healthz answered {}", health.status());
        }
        api.process.ensure_running().with_context(|| format!("round {round} of seed {seed}"))?;
    }
    ensure!(api.process.panics() == 0, "the server panicked (seed {seed}):\n{}", api.process.tail());
    let viewer = client.run("{ viewer { subjectId } }", json!({})).await?;
    ensure!(viewer["viewer"]["subjectId"] == "alice", "{viewer}");
    eprintln!(
        "hostile_fuzz ({}): {} requests, {} sessions; statuses {:?}; codes {:?}; WebSocket endings {:?}",
        db.backend.name(),
        tally.requests,
        tally.sessions,
        tally.statuses,
        tally.codes,
        tally.closes
    );
    Ok(())
}
