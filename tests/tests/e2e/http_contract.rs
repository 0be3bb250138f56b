//! GraphQL over HTTP as clients meet it: the graphql-http audit (a real client), content
//! negotiation, the body limit, GET without mutations, credentials, and query limits.
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, ensure};
use kfs_tests::server::{TestServer, chrono_now, first_error_code};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        graphql_http_audit_reports_no_error_and_no_warning,
        a_body_over_the_limit_is_refused_with_a_graphql_error,
        mutations_over_get_answer_405,
        a_bad_or_expired_token_is_unauthenticated,
        an_anonymous_caller_gets_unauthenticated_from_a_guarded_field,
        a_too_deep_query_is_too_complex,
        graphql_response_json_gets_400_for_an_invalid_document,
        health_readiness_and_metrics_answer,
    ]
}

/// Installs the Node clients once per process (`npm ci` needs the registry only once).
pub(crate) fn node_clients() -> anyhow::Result<std::path::PathBuf> {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _guard = INSTALL.lock().map_err(|_| anyhow::anyhow!("npm install lock poisoned"))?;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    if !dir.join("node_modules/graphql-http").exists() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .status()
            .context("running npm ci for the test clients (is Node.js installed?)")?;
        ensure!(status.success(), "npm ci --prefix tests failed");
    }
    Ok(dir)
}

async fn graphql_http_audit_reports_no_error_and_no_warning(db: TestDb) -> anyhow::Result<()> {
    let dir = node_clients()?;
    let server = TestServer::start(&db.url, false).await?;
    let url = server.graphql_url();
    let output = tokio::process::Command::new("node")
        .arg(dir.join("node/graphql-http-audit.mjs"))
        .arg(&url)
        .output()
        .await
        .context("running node")?;
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}");
    ensure!(
        output.status.success(),
        "graphql-http audit failed:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(report.contains("0 warnings, 0 errors"), "unexpected audit summary: {report}");
    server.stop().await;
    Ok(())
}

async fn a_body_over_the_limit_is_refused_with_a_graphql_error(db: TestDb) -> anyhow::Result<()> {
    let server = TestServer::start(&db.url, false).await?;
    let padding = "x".repeat(300 * 1024);
    let response = server
        .http
        .post(server.graphql_url())
        .header("content-type", "application/json")
        .body(json!({ "query": "{ __typename }", "variables": { "pad": padding } }).to_string())
        .send()
        .await?;
    ensure!(response.status().as_u16() == 413, "status {}", response.status());
    let body: Value = response.json().await?;
    ensure!(first_error_code(&body).as_deref() == Some("BAD_USER_INPUT"), "{body}");
    server.stop().await;
    Ok(())
}

async fn mutations_over_get_answer_405(db: TestDb) -> anyhow::Result<()> {
    let server = TestServer::start(&db.url, false).await?;
    let response = server
        .http
        .get(server.graphql_url())
        .query(&[("query", "mutation { createKnowledgeSpace(input: {name: \"x\"}) { id } }")])
        .send()
        .await?;
    ensure!(response.status().as_u16() == 405, "status {}", response.status());
    let query = server.http.get(server.graphql_url()).query(&[("query", "{ __typename }")]).send().await?;
    ensure!(query.status().as_u16() == 200, "a GET query must work: {}", query.status());
    server.stop().await;
    Ok(())
}

async fn a_bad_or_expired_token_is_unauthenticated(db: TestDb) -> anyhow::Result<()> {
    let server = TestServer::start(&db.url, false).await?;
    let expired = TestServer::token_with("alice", "acme", None, chrono_now() - 10);
    let forged = format!("{}x", TestServer::token("alice", "acme"));
    let service_claim = TestServer::token_with("alice", "acme", Some("service_api"), chrono_now() + 60);
    for bearer in [expired.as_str(), forged.as_str(), service_claim.as_str(), "kfs_00_nope", "garbage"] {
        let (status, body) = server.post(Some(bearer), "{ viewer { subjectId } }", json!({})).await?;
        ensure!(status == 200, "application/json answers 200, got {status}");
        ensure!(first_error_code(&body).as_deref() == Some("UNAUTHENTICATED"), "{bearer}: {body}");
        ensure!(body.get("data").is_none_or(Value::is_null), "no data for a refused credential: {body}");
    }
    let strict = server
        .http
        .post(server.graphql_url())
        .header("content-type", "application/json")
        .header("accept", "application/graphql-response+json")
        .header("authorization", format!("Bearer {expired}"))
        .body(json!({ "query": "{ viewer { subjectId } }" }).to_string())
        .send()
        .await?;
    ensure!(strict.status().as_u16() == 401, "graphql-response+json answers 401, got {}", strict.status());
    server.stop().await;
    Ok(())
}

async fn an_anonymous_caller_gets_unauthenticated_from_a_guarded_field(db: TestDb) -> anyhow::Result<()> {
    let server = TestServer::start(&db.url, false).await?;
    let (status, body) = server.post(None, "{ viewer { subjectId } }", json!({})).await?;
    ensure!(status == 200, "status {status}");
    ensure!(first_error_code(&body).as_deref() == Some("UNAUTHENTICATED"), "{body}");
    let (_, introspection) = server.post(None, "{ __schema { queryType { name } } }", json!({})).await?;
    ensure!(introspection.pointer("/data/__schema/queryType/name") == Some(&json!("Query")), "{introspection}");
    server.stop().await;
    Ok(())
}

async fn a_too_deep_query_is_too_complex(db: TestDb) -> anyhow::Result<()> {
    let server = TestServer::start(&db.url, false).await?;
    let token = TestServer::token("alice", "acme");
    let mut deep = String::from("name");
    for _ in 0..40 {
        deep = format!("ofType {{ {deep} }}");
    }
    let query = format!("{{ __type(name: \"Query\") {{ {deep} }} }}");
    let (_, body) = server.post(Some(&token), &query, json!({})).await?;
    ensure!(first_error_code(&body).as_deref() == Some("TOO_COMPLEX"), "{body}");
    server.stop().await;
    Ok(())
}

async fn graphql_response_json_gets_400_for_an_invalid_document(db: TestDb) -> anyhow::Result<()> {
    let server = TestServer::start(&db.url, false).await?;
    let response = server
        .http
        .post(server.graphql_url())
        .header("content-type", "application/json")
        .header("accept", "application/graphql-response+json")
        .body(json!({ "query": "{ noSuchField }" }).to_string())
        .send()
        .await?;
    ensure!(response.status().as_u16() == 400, "status {}", response.status());
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    ensure!(content_type.starts_with("application/graphql-response+json"), "{content_type}");
    let body: Value = response.json().await?;
    ensure!(body.get("data").is_none(), "no data entry: {body}");
    ensure!(first_error_code(&body).as_deref() == Some("BAD_USER_INPUT"), "{body}");
    server.stop().await;
    Ok(())
}

async fn health_readiness_and_metrics_answer(db: TestDb) -> anyhow::Result<()> {
    let server = TestServer::start(&db.url, false).await?;
    let base = server.server.base_url();
    for path in ["/healthz", "/readyz", "/graphiql"] {
        let status = server.http.get(format!("{base}{path}")).send().await?.status();
        ensure!(status.as_u16() == 200, "{path}: {status}");
    }
    let metrics = server.http.get(format!("{base}/metrics")).send().await?.text().await?;
    ensure!(metrics.contains("http_requests_total"), "metrics: {metrics}");
    server.stop().await;
    Ok(())
}
