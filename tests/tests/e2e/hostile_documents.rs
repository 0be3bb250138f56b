//! Documents built to make the parser or validator recurse or fan out: fragment chains the
//! operation never uses (the anonymous request that once aborted the process), fragment
//! fan-out, deep selections, deep input literals and deep variables, too many tokens or
//! fragments. Every one is answered with BAD_USER_INPUT or TOO_COMPLEX and a status under
//! 500, over HTTP POST, HTTP GET and a WebSocket `subscribe` alike, and the server keeps
//! answering everyone else. How fast each is answered is printed here and measured by the
//! `hostile` bench, not asserted.
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kfs_tests::ws::{Frame, WsClient};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};

use kfs_tests::hostile::{documents, unused_fragment_chain};

use crate::api_support::Api;
use crate::live_support::refused_on_socket;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        hostile_documents_are_refused_over_http_with_a_code_and_no_server_error,
        hostile_documents_are_refused_over_a_websocket_and_the_connection_stays_up,
        hostile_documents_at_once_leave_the_server_answering_others,
        ordinary_documents_with_fragments_still_run,
    ]
}

/// The codes a refused document may carry.
const REFUSALS: [&str; 2] = ["BAD_USER_INPUT", "TOO_COMPLEX"];

/// The code of a refused answer, checking the status is not a server error.
fn refusal_code(what: &str, status: u16, body: &Value) -> anyhow::Result<String> {
    ensure!(status < 500, "{what}: status {status}: {body}");
    let code = kfs_tests::server::first_error_code(body).with_context(|| format!("{what}: no error code in {body}"))?;
    ensure!(REFUSALS.contains(&code.as_str()), "{what}: answered {code}: {body}");
    Ok(code)
}

/// POSTs a document with its variables as JSON text.
pub async fn post_raw(api: &Api, query: &str, variables: &str) -> anyhow::Result<(u16, Value)> {
    let body = format!("{{\"query\":{},\"variables\":{variables}}}", serde_json::to_string(query)?);
    let response = api
        .server
        .http
        .post(api.server.graphql_url())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = response.status().as_u16();
    Ok((status, response.json::<Value>().await.unwrap_or(Value::Null)))
}

async fn hostile_documents_are_refused_over_http_with_a_code_and_no_server_error(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    // Documents as large as the guard's 1 MiB document limit, and then bodies as large as
    // the default body limit (twice the 5 MiB content limit and 1 MiB) that carry the bulk
    // in their variables or past the document limit.
    let body_limit = 11 * 1024 * 1024;
    let space = uuid::Uuid::nil();
    let mut hostile = documents(1024 * 1024 - 4 * 1024, 100_000);
    // Tiny values by the hundred thousand cost a parser far more than their bytes.
    hostile.push(kfs_tests::hostile::Hostile {
        what: "800,000 small variables".to_owned(),
        query: format!("query{{researchTasks(knowledgeSpaceId:\"{space}\"){{edges{{cursor}}}}}}"),
        variables: format!("{{{}\"end\":0}}", (0..800_000).map(|i| format!("\"v{i}\":[],")).collect::<String>()),
    });
    // Bodies that need not be refused, only answered without a server error (a 3.8 MB
    // document content is within limits: its space does not exist).
    let large = [
        kfs_tests::hostile::Hostile {
            what: "a document past the document limit".to_owned(),
            query: format!("query{{{}}}", "__typename ".repeat((body_limit - 2_048) / 11)),
            variables: "{}".to_owned(),
        },
        kfs_tests::hostile::Hostile {
            what: "content at the body limit, every character escaped".to_owned(),
            query: "mutation($c:String!){addKnowledgeDocument(input:{knowledgeSpaceId:\"00000000-0000-0000-0000-000000000000\",title:\"t\",content:$c}){id}}".to_owned(),
            variables: format!("{{\"c\":\"{}\"}}", "\\u00e9".repeat((body_limit - 1_024) / 6)),
        },
        kfs_tests::hostile::Hostile {
            what: "a variable nested as deep as the body limit allows".to_owned(),
            query: "query($s:[ResearchStage!]){viewer{subjectId}}".to_owned(),
            variables: format!("{{\"s\":{}\"QUEUED\"{}}}", "[".repeat(body_limit / 2 - 64), "]".repeat(body_limit / 2 - 64)),
        },
    ];
    for document in large {
        ensure!(
            document.query.len() + document.variables.len() < body_limit,
            "{} does not fit the body",
            document.what
        );
        let started = Instant::now();
        let (status, body) = post_raw(&api, &document.query, &document.variables).await?;
        ensure!(status < 500, "{}: status {status}: {body}", document.what);
        let code = kfs_tests::server::first_error_code(&body).unwrap_or_else(|| "no error".to_owned());
        eprintln!(
            "hostile ({}): {} answered {status} {code} in {:?}",
            db.backend.name(),
            document.what,
            started.elapsed()
        );
    }
    for document in hostile {
        let started = Instant::now();
        let (status, body) = post_raw(&api, &document.query, &document.variables).await?;
        let code = refusal_code(&document.what, status, &body)?;
        eprintln!(
            "hostile ({}): {} ({} bytes) answered {code} in {:?}",
            db.backend.name(),
            document.what,
            document.query.len(),
            started.elapsed()
        );
    }
    // GET carries the document in the URL: the small ones go that way too.
    for document in documents(1024 * 1024 - 4 * 1024, 0)
        .into_iter()
        .filter(|document| document.query.len() < 4_000 && document.variables == "{}")
    {
        let response =
            api.server.http.get(api.server.graphql_url()).query(&[("query", document.query.as_str())]).send().await?;
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        refusal_code(&format!("{} over GET", document.what), status, &body)?;
    }
    let data = api.data(Some(&api.token("alice")), "{ viewer { subjectId } }", json!({})).await?;
    ensure!(data["viewer"]["subjectId"] == "alice", "{data}");
    api.stop().await;
    Ok(())
}

async fn hostile_documents_are_refused_over_a_websocket_and_the_connection_stays_up(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("alice"))).await?;
    // A client message may be 64 KiB; each document is sized to fit one. Variables nest
    // within what a JSON parser takes (deeper ones make the whole message invalid: 4400).
    for (index, document) in documents(60 * 1024, 100).into_iter().enumerate() {
        let id = format!("h{index}");
        let message = format!(
            "{{\"type\":\"subscribe\",\"id\":\"{id}\",\"payload\":{{\"query\":{},\"variables\":{}}}}}",
            serde_json::to_string(&document.query)?,
            document.variables
        );
        if message.len() > 64 * 1024 {
            continue;
        }
        client.send_text(&message).await?;
        let code = refused_on_socket(&mut client, &id).await.with_context(|| document.what.clone())?;
        ensure!(REFUSALS.contains(&code.as_str()), "{}: answered {code}", document.what);
    }
    client.send(json!({ "type": "ping" })).await?;
    match client.recv().await? {
        Frame::Message(message) if message["type"] == "pong" => {}
        other => bail!("the connection did not answer a ping after the hostile documents: {other:?}"),
    }
    api.stop().await;
    Ok(())
}

async fn hostile_documents_at_once_leave_the_server_answering_others(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let chain = unused_fragment_chain(7_000);
    let attacks: Vec<_> = (0..4)
        .map(|_| {
            let (http, url, body) = (api.server.http.clone(), api.server.graphql_url(), json!({ "query": chain }));
            tokio::spawn(
                async move { http.post(url).json(&body).send().await.map(|response| response.status().as_u16()) },
            )
        })
        .collect();
    let healthz = format!("{}/healthz", api.server.server.base_url());
    let started = Instant::now();
    let health = tokio::time::timeout(Duration::from_secs(30), api.server.http.get(&healthz).send())
        .await
        .context("healthz hung while hostile documents were answered")??;
    ensure!(health.status().is_success(), "/healthz answered {}", health.status());
    eprintln!(
        "hostile ({}): /healthz answered in {:?} beside four 7,000-fragment chains",
        db.backend.name(),
        started.elapsed()
    );
    for attack in attacks {
        let status = attack.await??;
        ensure!(status < 500, "a fragment chain answered {status}");
    }
    api.stop().await;
    Ok(())
}

/// The guard must not refuse what clients really send: GraphiQL's introspection query is
/// covered by `api_limits`; here, fragments on fragments and a legitimately long document.
async fn ordinary_documents_with_fragments_still_run(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let token = api.token("alice");
    let space = api.space("alice").await?;
    let query = "query($s: UUID!) { ...Root } \
                 fragment Root on Query { viewer { ...Who } knowledgeSpace(id: $s) { ...Space } } \
                 fragment Who on Viewer { subjectId tenantId } \
                 fragment Space on KnowledgeSpace { id name viewerRole }";
    let data = api.data(Some(&token), query, json!({ "s": space })).await?;
    ensure!(data["viewer"]["subjectId"] == "alice" && data["knowledgeSpace"]["id"] == space, "{data}");
    let aliases: String = (0..500).map(|i| format!("a{i}: viewer {{ subjectId }} ")).collect();
    let data = api.data(Some(&token), &format!("{{ {aliases} }}"), json!({})).await?;
    ensure!(data["a499"]["subjectId"] == "alice", "{data}");
    api.stop().await;
    Ok(())
}
