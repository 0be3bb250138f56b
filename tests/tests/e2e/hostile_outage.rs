//! While the database is unreachable, requests answer 503 with `Retry-After` and the
//! GraphQL code SERVICE_UNAVAILABLE (not INTERNAL_SERVER_ERROR), `/readyz` fails, and when
//! it is back everything written before is still there and writes work again. PostgreSQL
//! alone: it runs on a private cluster (the one the restart tests use) that the test stops.
use std::time::{Duration, Instant};

use anyhow::ensure;
use kfs_tests::process::wait_until;
use kfs_tests::server::TestServer;
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::{Api, READ_TASK, string_at};
use crate::live_postgres_restart::cluster::{Control, PrivatePostgres};

pub fn tests() -> Vec<DbTest> {
    db_tests![; postgres_only: requests_answer_503_while_the_database_is_down_and_work_once_it_is_back]
}

async fn requests_answer_503_while_the_database_is_down_and_work_once_it_is_back(
    _shared: TestDb,
) -> anyhow::Result<()> {
    let cluster = PrivatePostgres::start().await?;
    let server = TestServer::start(&cluster.url(), false).await?;
    let api = Api { server, tenant: format!("tenant-{}", Uuid::new_v4().simple()) };
    let token = api.token("alice");
    let space = api.space("alice").await?;
    let task = string_at(&api.task(&token, &space).await?, "/id")?;

    cluster.control(Control::Stop).await?;
    let started = Instant::now();
    let response = api
        .server
        .http
        .post(api.server.graphql_url())
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .json(&json!({ "query": READ_TASK, "variables": { "id": task } }))
        .send()
        .await?;
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|value| value.to_str().ok()).map(str::to_owned);
    let body: Value = response.json().await?;
    eprintln!("hostile_outage: a read answered {status} {:?} after the database stopped", started.elapsed());
    ensure!(status == 503, "a read with the database down answered {status}: {body}");
    ensure!(
        retry_after.as_deref().and_then(|value| value.parse::<u32>().ok()).is_some(),
        "no Retry-After: {retry_after:?}"
    );
    ensure!(kfs_tests::server::first_error_code(&body).as_deref() == Some("SERVICE_UNAVAILABLE"), "{body}");
    ensure!(
        !body.to_string().contains("127.0.0.1") && !body.to_string().to_lowercase().contains("connection"),
        "the answer leaks the cause: {body}"
    );
    // A key is authenticated against the database: that path answers the same.
    let (status, body) =
        api.server.post(Some("kfs_00000000000000000000000000000000_00"), "{ viewer { subjectId } }", json!({})).await?;
    ensure!(
        status == 503 && kfs_tests::server::first_error_code(&body).as_deref() == Some("SERVICE_UNAVAILABLE"),
        "{status} {body}"
    );
    let ready = api.server.http.get(format!("{}/readyz", api.server.server.base_url())).send().await?;
    ensure!(ready.status().as_u16() == 503, "/readyz answered {}", ready.status());

    cluster.control(Control::Start).await?;
    wait_until(Duration::from_secs(60), "the API to answer again", async || {
        let (status, _) = api.server.post(Some(&token), READ_TASK, json!({ "id": task })).await?;
        Ok(status == 200)
    })
    .await?;
    let read = api.data(Some(&token), READ_TASK, json!({ "id": task })).await?;
    ensure!(read["researchTask"]["stage"] == "QUEUED", "the task written before the outage: {read}");
    api.task(&token, &space).await?;
    let ready = api.server.http.get(format!("{}/readyz", api.server.server.base_url())).send().await?;
    ensure!(ready.status().is_success(), "/readyz answered {} once the database was back", ready.status());
    api.stop().await;
    Ok(())
}
