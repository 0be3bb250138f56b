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
        cors_admits_the_configured_origins_only,
    ]
}

/// Installs the Node clients once per process (`npm ci` needs the registry only once),
/// with npm's output captured so it never interleaves with the test results (it is shown
/// only if the install fails).
pub(crate) fn node_clients() -> anyhow::Result<std::path::PathBuf> {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _guard = INSTALL.lock().map_err(|_| anyhow::anyhow!("npm install lock poisoned"))?;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("package.json"))?)?;
    let installed = manifest["dependencies"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(package, _)| dir.join("node_modules").join(package).join("package.json").is_file());
    if !installed {
        let output = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .output()
            .context("running npm ci for the test clients (is Node.js installed?)")?;
        ensure!(
            output.status.success(),
            "npm ci --prefix tests failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
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
    let server = TestServer::start_with(&db.url, |settings| settings.max_body_bytes = Some(256 * 1024)).await?;
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

/// A preflight (OPTIONS with `Access-Control-Request-*`) from `origin`; returns the status
/// and the `Access-Control-Allow-Origin` and `-Headers` it answered.
async fn preflight(server: &TestServer, origin: &str) -> anyhow::Result<(u16, Option<String>, Option<String>)> {
    let response = server
        .http
        .request(reqwest::Method::OPTIONS, server.graphql_url())
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization,content-type,graphql-preflight")
        .send()
        .await?;
    let header = |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
    Ok((response.status().as_u16(), header("access-control-allow-origin"), header("access-control-allow-headers")))
}

/// `KFS_CORS_ORIGINS` admits exactly its origins, with `Authorization` (no cookies); by
/// default no other origin is admitted; an origin that is not one stops the start.
async fn cors_admits_the_configured_origins_only(db: TestDb) -> anyhow::Result<()> {
    let allowed = "http://app.example:3000";
    let server = TestServer::start_with(&db.url, |settings| settings.cors_origins = vec![allowed.to_owned()]).await?;
    let (status, origin, headers) = preflight(&server, allowed).await?;
    ensure!(status < 300 && origin.as_deref() == Some(allowed), "the allowed origin's preflight: {status} {origin:?}");
    ensure!(
        headers.is_some_and(|headers| {
            let headers = headers.to_lowercase();
            headers.contains("authorization") && headers.contains("graphql-preflight")
        }),
        "Authorization or GraphQL-Preflight (which uploads carry) not allowed"
    );
    let (_, refused, _) = preflight(&server, "http://evil.example").await?;
    ensure!(refused.is_none(), "a refused origin was answered with Access-Control-Allow-Origin: {refused:?}");
    let (status, body) =
        server.post(Some(&TestServer::token("alice", "acme")), "{ viewer { subjectId } }", json!({})).await?;
    ensure!(status == 200 && body["data"]["viewer"]["subjectId"] == "alice", "{status} {body}");
    let simple = server
        .http
        .post(server.graphql_url())
        .header("origin", allowed)
        .json(&json!({ "query": "{ __typename }" }))
        .send()
        .await?;
    let echoed =
        simple.headers().get("access-control-allow-origin").and_then(|value| value.to_str().ok()).map(str::to_owned);
    ensure!(echoed.as_deref() == Some(allowed), "a request from the allowed origin got {echoed:?}");
    ensure!(
        simple.headers().get("access-control-allow-credentials").is_none(),
        "credentials (cookies) must not be allowed"
    );
    server.stop().await;

    let closed = TestServer::start(&db.url, false).await?;
    let (_, origin, _) = preflight(&closed, allowed).await?;
    ensure!(origin.is_none(), "with no origins configured, another origin was admitted: {origin:?}");
    closed.stop().await;

    let bad =
        TestServer::start_with(&db.url, |settings| settings.cors_origins = vec!["not an origin".to_owned()]).await;
    ensure!(bad.is_err(), "an origin that is not one was accepted");
    Ok(())
}
