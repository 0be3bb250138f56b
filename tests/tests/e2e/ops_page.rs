//! `/ops`: its data is for the subjects `KFS_OPERATOR_SUBJECTS` names alone (everyone else
//! gets 404, as for a page that does not exist), it streams counts and ids but never a
//! task's content, and in a real browser, with the internet refused, it shows the queue
//! live and redelivers a dead outbox row.
use std::time::Duration;

use anyhow::{Context as _, ensure};
use entity::{OutboxStatus, research_task_outbox as outbox};
use kfs_tests::server::TestServer;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ActiveValue::Set, EntityTrait};
use serde_json::Value;

use crate::http_contract::node_clients;

pub fn tests() -> Vec<DbTest> {
    db_tests![ops_data_is_for_operators_alone_and_carries_no_task_content]
        .into_iter()
        .chain(db_tests![the_ops_page_shows_the_queue_live_in_a_browser].into_iter().map(DbTest::needing_chromium))
        .collect()
}

const SECRET_QUERY: &str = "What is the confidential merger codename?";

/// A server whose operator is `ops-admin`, with a queued task and a dead outbox row.
async fn server(db: &TestDb) -> anyhow::Result<(TestServer, entity::research_task_outbox::Model)> {
    let server =
        TestServer::start_with(&db.url, |settings| settings.operator_subjects = vec!["ops-admin".to_owned()]).await?;
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "owner", entity::MemberRole::Owner).await?;
    let input = fixtures::new_task(fixtures::member_grant(&owner, entity::AccessChannel::Interactive), SECRET_QUERY);
    let task = worker::lifecycle::create(&db.db, &worker::Notifier::new(), input, entity::now_millis()).await?.task;
    let mut dead = fixtures::outbox_row(&task, 9, "dead-for-ops");
    dead.status = Set(OutboxStatus::Dead);
    dead.last_error = Set(Some("the queue refused it".into()));
    let dead = outbox::Entity::insert(dead).exec_with_returning(&db.db).await?;
    Ok((server, dead))
}

/// The first event of `/ops/stream` as `bearer`, or the status it answered instead.
async fn first_event(server: &TestServer, bearer: Option<&str>) -> anyhow::Result<Result<Value, u16>> {
    let mut request = reqwest::Client::new().get(format!("{}/ops/stream", server.server.base_url()));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let mut response = request.send().await?;
    if !response.status().is_success() {
        return Ok(Err(response.status().as_u16()));
    }
    ensure_eq!(response.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("text/event-stream"));
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk =
            tokio::time::timeout(Duration::from_secs(10), response.chunk()).await??.context("the stream ended")?;
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = text.split("\n\n").next().and_then(|event| event.strip_prefix("data: ")).context("no data line")?;
    Ok(Ok(serde_json::from_str(data)?))
}

async fn ops_data_is_for_operators_alone_and_carries_no_task_content(db: TestDb) -> anyhow::Result<()> {
    let (server, dead) = server(&db).await?;
    let operator = TestServer::token("ops-admin", "any-tenant");
    for bearer in [None, Some(TestServer::token("alice", "any-tenant")), Some(TestServer::token("ops-admin-not", "t"))]
    {
        ensure_eq!(first_event(&server, bearer.as_deref()).await?.err(), Some(404), "{bearer:?}");
        let mut redeliver =
            reqwest::Client::new().post(format!("{}/ops/outbox/{}/redeliver", server.server.base_url(), dead.id));
        if let Some(bearer) = &bearer {
            redeliver = redeliver.bearer_auth(bearer);
        }
        ensure_eq!(redeliver.send().await?.status().as_u16(), 404);
        // Whatever the path holds and whatever the method, the same 404: a malformed id,
        // an unknown route, a GET of a POST route (before, a malformed id answered 400 and a
        // wrong method 405, telling anyone the route's shape).
        for (method, path) in [
            (reqwest::Method::POST, "/ops/outbox/not-a-uuid/redeliver"),
            (reqwest::Method::GET, &*format!("/ops/outbox/{}/redeliver", dead.id)),
            (reqwest::Method::DELETE, "/ops/stream"),
            (reqwest::Method::GET, "/ops/nothing/here"),
            (reqwest::Method::POST, "/ops/outbox/%00/redeliver"),
        ] {
            let mut request =
                reqwest::Client::new().request(method.clone(), format!("{}{path}", server.server.base_url()));
            if let Some(bearer) = &bearer {
                request = request.bearer_auth(bearer);
            }
            let response = request.send().await?;
            ensure_eq!(response.status().as_u16(), 404, "{method} {path} as {bearer:?}");
            ensure_eq!(response.text().await?, "not found", "{method} {path}: the same body as any missing page");
        }
    }
    // An operator's malformed id is a plain 404 too.
    let malformed = reqwest::Client::new()
        .post(format!("{}/ops/outbox/not-a-uuid/redeliver", server.server.base_url()))
        .bearer_auth(&operator)
        .send()
        .await?;
    ensure_eq!(malformed.status().as_u16(), 404);
    let event = first_event(&server, Some(&operator)).await?.map_err(|status| anyhow::anyhow!("refused: {status}"))?;
    let snapshot = &event["snapshot"];
    let queued = snapshot["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|pair| pair[0] == "queued"))
        .context("queued")?;
    ensure!(queued[1].as_i64() >= Some(1), "{snapshot}");
    ensure!(
        snapshot["dead_outbox"].as_array().is_some_and(|rows| rows.iter().any(|row| row["id"] == dead.id.to_string()))
    );
    ensure_eq!(snapshot["threads"], serde_json::json!({ "threads": 0, "enqueued_turns": 0 }), "{snapshot}");
    ensure!(!event.to_string().contains(SECRET_QUERY), "no task content in the stream");
    let url = format!("{}/ops/outbox/{}/redeliver", server.server.base_url(), dead.id);
    let redelivered = reqwest::Client::new().post(&url).bearer_auth(&operator).send().await?;
    ensure_eq!(redelivered.status().as_u16(), 200);
    let row = outbox::Entity::find_by_id(dead.id).one(&db.db).await?.context("row")?;
    ensure_eq!(row.status, OutboxStatus::Pending);
    ensure_eq!(
        reqwest::Client::new().post(&url).bearer_auth(&operator).send().await?.status().as_u16(),
        404,
        "not dead any more"
    );
    // The stream lasts as long as its token: one that expires in 3 s ends it then.
    let short = TestServer::token_with("ops-admin", "any-tenant", None, kfs_tests::server::chrono_now() + 3);
    let mut response = reqwest::Client::new()
        .get(format!("{}/ops/stream", server.server.base_url()))
        .bearer_auth(&short)
        .send()
        .await?;
    ensure_eq!(response.status().as_u16(), 200);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while response.chunk().await?.is_some() {}
        Ok::<_, reqwest::Error>(())
    })
    .await;
    ensure!(matches!(ended, Ok(Ok(()))), "the stream outlived its token: {ended:?}");
    server.stop().await;
    Ok(())
}

async fn the_ops_page_shows_the_queue_live_in_a_browser(db: TestDb) -> anyhow::Result<()> {
    let dir = node_clients()?;
    let (server, _) = server(&db).await?;
    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/browser/ops").join(db.backend.name());
    let output = tokio::process::Command::new("node")
        .arg(dir.join("node/ops-browser.mjs"))
        .arg(server.server.base_url())
        .arg(&shots)
        .arg(TestServer::token("ops-admin", "any-tenant"))
        .arg(TestServer::token("alice", "any-tenant"))
        .arg(SECRET_QUERY)
        .env("KFS_CHROMIUM", kfs_tests::harness::chromium())
        .output()
        .await
        .context("running the browser script (is Node.js installed?)")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = stdout.lines().rev().find_map(|line| serde_json::from_str(line).ok()).with_context(|| {
        format!("no report from the browser script: {stdout}{}", String::from_utf8_lossy(&output.stderr))
    })?;
    for shot in report["screenshots"].as_array().into_iter().flatten() {
        eprintln!("ops_page ({}): screenshot {}", db.backend.name(), shot.as_str().unwrap_or_default());
    }
    ensure!(report["errors"] == Value::Array(vec![]), "the page reported errors: {}", report["errors"]);
    ensure!(report["ok"] == true, "the browser run failed: {report}");
    let shown = report["shown"].as_str().unwrap_or_default();
    ensure!(shown.contains("queued") && shown.contains("the queue refused it"), "{shown}");
    server.stop().await;
    Ok(())
}
