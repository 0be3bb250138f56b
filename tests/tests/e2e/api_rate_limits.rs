//! Rate limits at the API, per principal and per tenant: requests per second and GraphQL
//! cost points per minute answer 429 with `Retry-After`, a RATE_LIMITED error with
//! `retryAfterSeconds`, and the `RateLimit-Policy` / `RateLimit` headers on every response;
//! on WebSockets, connections per principal and operations are limited alike.
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kfs_tests::ws::{Event, WsClient};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::{Value, json};

use crate::api_support::Api;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        requests_past_the_rate_answer_429_with_retry_after_and_ratelimit_headers,
        cost_points_are_charged_with_each_documents_complexity,
        a_tenants_principals_share_the_tenant_bucket,
        websocket_connections_and_operations_are_limited_per_principal,
        requests_without_a_working_credential_are_limited_by_address,
        a_credential_that_does_not_authenticate_is_limited_before_its_body_is_read,
    ]
}

/// One POST, with its status, its rate headers and its body.
async fn post(
    api: &Api,
    token: &str,
    query: &str,
) -> anyhow::Result<(u16, Option<String>, Option<String>, Option<String>, Value)> {
    let response = reqwest::Client::new()
        .post(api.server.graphql_url())
        .bearer_auth(token)
        .json(&json!({ "query": query }))
        .send()
        .await?;
    let header = |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let (policy, now, retry) = (header("ratelimit-policy"), header("ratelimit"), header("retry-after"));
    let status = response.status().as_u16();
    Ok((status, policy, now, retry, response.json().await?))
}

const VIEWER: &str = "{ viewer { subjectId } }";

async fn requests_past_the_rate_answer_429_with_retry_after_and_ratelimit_headers(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.rate_requests_per_second = Some(5)).await?;
    let alice = api.token("alice");
    for left in (0..5).rev() {
        let (status, policy, now, _, body) = post(&api, &alice, VIEWER).await?;
        ensure_eq!(status, 200, "{body}");
        ensure_eq!(policy.as_deref(), Some("\"requests\";q=5;w=1"));
        let now = now.context("no RateLimit header")?;
        ensure!(now.starts_with(&format!("\"requests\";r={left};t=")), "{now}");
    }
    let (status, _, now, retry, body) = post(&api, &alice, VIEWER).await?;
    ensure_eq!(status, 429, "{body}");
    ensure_eq!(body["errors"][0]["extensions"]["code"], json!("RATE_LIMITED"));
    let wait = body["errors"][0]["extensions"]["retryAfterSeconds"].as_u64().context("retryAfterSeconds")?;
    ensure!(wait >= 1, "{body}");
    ensure_eq!(retry.as_deref(), Some(wait.to_string().as_str()), "Retry-After matches");
    ensure!(now.is_some_and(|now| now.contains("r=0")));
    // Refusals are counted in /metrics, by bucket (never by caller).
    let metrics = reqwest::get(format!("{}/metrics", api.server.server.base_url())).await?.text().await?;
    ensure!(metrics.contains("rate_limited_total{bucket=\"requests\"}"), "{metrics}");
    ensure!(!metrics.contains("alice"), "no caller in the metrics");
    // Another principal has a bucket of its own; alice gets hers back after the window.
    ensure_eq!(post(&api, &api.token("bob"), VIEWER).await?.0, 200);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    ensure_eq!(post(&api, &alice, VIEWER).await?.0, 200);
    api.stop().await;
    Ok(())
}

async fn cost_points_are_charged_with_each_documents_complexity(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.rate_cost_points_per_minute = Some(120)).await?;
    let alice = api.token("alice");
    let (status, policy, now, _, body) = post(&api, &alice, VIEWER).await?;
    ensure_eq!(status, 200, "{body}");
    ensure_eq!(policy.as_deref(), Some("\"cost\";q=120;w=60"));
    let remaining = |now: &str| -> anyhow::Result<u32> {
        let r = now.split(";r=").nth(1).and_then(|rest| rest.split(';').next()).context("no r")?;
        Ok(r.parse()?)
    };
    let after_viewer = remaining(&now.context("RateLimit")?)?;
    ensure!((110..120).contains(&after_viewer), "a small query costs little: {after_viewer}");
    // A page of 50 spaces with two fields each costs its complexity: over what is left.
    let page = "{ knowledgeSpaces(first: 50) { edges { node { id name } } } }";
    let (status, _, _, retry, body) = post(&api, &alice, page).await?;
    ensure_eq!(status, 429, "{body}");
    ensure_eq!(body["errors"][0]["extensions"]["code"], json!("RATE_LIMITED"));
    ensure!(retry.is_some());
    // Refused before it ran: what was left is still there for small queries.
    let (status, _, now, _, _) = post(&api, &alice, VIEWER).await?;
    ensure_eq!(status, 200);
    ensure!(remaining(&now.context("RateLimit")?)? < after_viewer);
    api.stop().await;
    Ok(())
}

async fn a_tenants_principals_share_the_tenant_bucket(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.rate_tenant_requests_per_second = Some(3)).await?;
    ensure_eq!(post(&api, &api.token("alice"), VIEWER).await?.0, 200);
    ensure_eq!(post(&api, &api.token("alice"), VIEWER).await?.0, 200);
    let (status, policy, _, _, _) = post(&api, &api.token("bob"), VIEWER).await?;
    ensure_eq!(status, 200);
    ensure_eq!(policy.as_deref(), Some("\"tenant-requests\";q=3;w=1"));
    ensure_eq!(post(&api, &api.token("bob"), VIEWER).await?.0, 429, "the tenant's bucket is empty");
    let stranger = kfs_tests::server::TestServer::token("carol", "another-tenant");
    ensure_eq!(post(&api, &stranger, VIEWER).await?.0, 200, "another tenant is not affected");
    api.stop().await;
    Ok(())
}

async fn websocket_connections_and_operations_are_limited_per_principal(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| {
        settings.ws_max_connections_per_principal = Some(1);
        settings.rate_requests_per_second = Some(2);
    })
    .await?;
    let url = api.server.ws_url();
    let alice = api.token("alice");
    let mut first = WsClient::connect_and_init(&url, Some(&alice)).await?;
    let mut second = WsClient::connect(&url, "graphql-transport-ws").await?;
    second
        .send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {alice}") } }))
        .await?;
    let (code, _) = second.expect_close(Duration::from_secs(5)).await?;
    ensure_eq!(code, 4029, "a second connection for one principal");
    // Someone else connects (the upgrade counts against the address, which has opened
    // two already this second).
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let bob = WsClient::connect_and_init(&url, Some(&api.token("bob"))).await?;
    bob.close().await?;
    // Operations count against the request rate: the third at once is refused alone.
    for id in ["1", "2", "3"] {
        first.subscribe(id, VIEWER, json!({})).await?;
    }
    let mut refused = Vec::new();
    let mut completed = 0;
    while completed + refused.len() < 3 {
        match first.next_event().await? {
            Event::Error(id, errors) => refused.push((id, errors)),
            Event::Complete(_) => completed += 1,
            Event::Next(..) => {}
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    ensure_eq!(completed, 2);
    ensure_eq!(refused.len(), 1);
    ensure_eq!(refused[0].1[0]["extensions"]["code"], json!("RATE_LIMITED"), "{:?}", refused);
    ensure!(refused[0].1[0]["extensions"]["retryAfterSeconds"].as_u64().is_some());
    // The connection stays up.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    first.subscribe("4", VIEWER, json!({})).await?;
    ensure!(matches!(first.next_event().await?, Event::Next(id, _) if id == "4"));
    first.close().await?;
    api.stop().await;
    Ok(())
}

async fn requests_without_a_working_credential_are_limited_by_address(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.rate_requests_per_second = Some(3)).await?;
    let anonymous = async || -> anyhow::Result<(u16, Option<String>)> {
        let response = reqwest::Client::new()
            .post(api.server.graphql_url())
            .json(&json!({ "query": "{ __typename }" }))
            .send()
            .await?;
        let policy =
            response.headers().get("ratelimit-policy").and_then(|value| value.to_str().ok()).map(str::to_owned);
        Ok((response.status().as_u16(), policy))
    };
    let (status, policy) = anonymous().await?;
    ensure_eq!(status, 200);
    ensure_eq!(policy.as_deref(), Some("\"requests\";q=3;w=1"));
    // A bearer that does not authenticate counts against the same address.
    let (_, _, _, _, body) = post(&api, "not-a-valid-token", VIEWER).await?;
    ensure_eq!(body["errors"][0]["extensions"]["code"], json!("UNAUTHENTICATED"), "{body}");
    ensure_eq!(anonymous().await?.0, 200);
    let (status, _) = anonymous().await?;
    ensure_eq!(status, 429, "the address used its three");
    let (status, _, _, _, body) = post(&api, "not-a-valid-token", VIEWER).await?;
    ensure_eq!(status, 429, "{body}");
    ensure_eq!(body["errors"][0]["extensions"]["code"], json!("RATE_LIMITED"));
    // A principal that authenticates has a bucket of its own.
    ensure_eq!(post(&api, &api.token("alice"), VIEWER).await?.0, 200);
    api.stop().await;
    Ok(())
}

/// Sends the head of a POST that announces `announced` body bytes, and `sent` of them,
/// over a raw connection, then reads the response's status line: a server that waited for
/// the rest of the body would never answer, so an answer means the body went unread.
async fn post_head(
    addr: std::net::SocketAddr,
    bearer: Option<&str>,
    announced: usize,
    sent: usize,
) -> anyhow::Result<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let authorization = bearer.map(|bearer| format!("Authorization: Bearer {bearer}\r\n")).unwrap_or_default();
    let head = format!(
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/graphql-response+json\r\n{authorization}Content-Length: {announced}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let mut body = br#"{"query":"{ viewer { subjectId } }","variables":{"x":""#.to_vec();
    let closing = br#""}}"#;
    body.resize(sent.saturating_sub(closing.len()).max(body.len()), b'a');
    body.extend_from_slice(closing);
    body.truncate(sent);
    stream.write_all(&body).await?;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        while !answer.windows(4).any(|window| window == b"\r\n\r\n") {
            let n = stream.read(&mut buffer).await?;
            anyhow::ensure!(n > 0, "the server closed without answering");
            answer.extend_from_slice(&buffer[..n]);
        }
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.context("no answer: the server waited for the body")??;
    let line = String::from_utf8_lossy(&answer);
    let status = line.split_whitespace().nth(1).and_then(|code| code.parse().ok()).context("no status line")?;
    Ok(status)
}

/// A bearer that does not authenticate buys no more reading than no bearer at all: its
/// request is answered from the headers (401, then 429 past the address's rate) without
/// its body being read, and the WebSocket upgrade counts the same way. Before, any
/// `Authorization` header skipped the address's limit and every body was read in full.
async fn a_credential_that_does_not_authenticate_is_limited_before_its_body_is_read(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.rate_requests_per_second = Some(5)).await?;
    let addr = api.server.server.addr;
    // 30 requests announcing 10 MiB and sending 97 KiB of it: none is left waiting for the rest.
    let mut statuses = Vec::new();
    for _ in 0..30 {
        statuses.push(post_head(addr, Some("x"), 10 * 1024 * 1024, 97 * 1024).await?);
    }
    let unauthenticated = statuses.iter().filter(|status| **status == 401).count();
    let limited = statuses.iter().filter(|status| **status == 429).count();
    ensure!((1..=6).contains(&unauthenticated), "at most the address's rate is answered 401: {statuses:?}");
    ensure_eq!(unauthenticated + limited, 30, "{statuses:?}");
    eprintln!(
        "api_rate_limits: 30 bad-bearer POSTs of a 10 MiB body: {unauthenticated} answered 401 and {limited} 429, 0 bodies read"
    );
    // No bearer at all is limited the same, from the same bucket.
    ensure_eq!(post_head(addr, None, 10 * 1024 * 1024, 1024).await?, 429);
    // The WebSocket upgrade is charged to the address too, with or without a bad bearer.
    let upgrade = |bearer: Option<&'static str>| async move {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let mut request = format!("ws://{addr}/graphql/ws").into_client_request()?;
        request.headers_mut().insert("sec-websocket-protocol", "graphql-transport-ws".parse()?);
        if let Some(bearer) = bearer {
            request.headers_mut().insert("authorization", format!("Bearer {bearer}").parse()?);
        }
        match tokio_tungstenite::connect_async(request).await {
            Ok(_) => Ok::<u16, anyhow::Error>(101),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Ok(response.status().as_u16()),
            Err(error) => Err(error.into()),
        }
    };
    ensure_eq!(upgrade(Some("x")).await?, 429, "an upgrade past the address's rate");
    ensure_eq!(upgrade(None).await?, 429);
    // A principal past its own rate is refused before its body is read as well: its
    // complete requests use up its five, then a 10 MiB announcement is answered at once.
    let alice = api.token("alice");
    let complete = br#"{"query":"{ viewer { subjectId } }","variables":{"x":""}}"#.len();
    let mut own = Vec::new();
    for _ in 0..5 {
        own.push(post_head(addr, Some(&alice), complete, complete).await?);
    }
    own.push(post_head(addr, Some(&alice), 10 * 1024 * 1024, 1024).await?);
    ensure!(own.last() == Some(&429), "{own:?}");
    api.stop().await;
    Ok(())
}
