//! Tokens from identity providers (JWKS) and from rotated HS256 secrets, through the
//! server's HTTP and WebSocket endpoints: the frontend flow across a key rotation at the
//! provider, every way a provider token can be wrong, a provider that is down with a warm
//! cache and with a cold one, and a secret rotated without logging anyone out.
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use api::auth::IssuerSettings;
use api::config::Settings;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use kfs_tests::jwks_server::{JwksServer, Outage, RSA_A_PUBLIC_PEM, TestKey};
use kfs_tests::server::{TestServer, first_error_code};
use kfs_tests::ws::WsClient;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::live_support::PROGRESS;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_frontend_signed_in_with_a_provider_follows_a_task_live_across_a_key_rotation,
        provider_tokens_are_checked_for_issuer_audience_algorithm_key_and_time,
        a_provider_that_is_down_is_served_from_a_warm_cache_and_refused_promptly_when_cold,
        hs256_secrets_rotate_without_logging_anyone_out,
    ]
}

const VIEWER: &str = "{ viewer { subjectId tenantId channel } }";

/// The issuer settings for `provider`, audience `kfs`, default claims and algorithms.
fn issuer(provider: &JwksServer) -> IssuerSettings {
    IssuerSettings {
        issuer: provider.issuer(),
        audience: vec!["kfs".to_owned()],
        jwks_url: provider.jwks_url(),
        algorithms: ["RS256", "ES256", "EdDSA"].map(str::to_owned).to_vec(),
        subject_claim: "sub".to_owned(),
        tenant_claim: "tenant".to_owned(),
        channel_claim: "channel".to_owned(),
    }
}

fn trusting(provider: &JwksServer) -> impl FnOnce(&mut Settings) {
    let issuer = issuer(provider);
    move |settings: &mut Settings| {
        settings.jwt_issuers = vec![issuer];
        settings.jwks_timeout_ms = 500;
    }
}

/// The subject `viewer` names for `token`, or the error code it was refused with.
async fn viewer(server: &TestServer, token: &str) -> anyhow::Result<Result<String, String>> {
    let (_, body) = server.post(Some(token), VIEWER, json!({})).await?;
    Ok(match body.pointer("/data/viewer/subjectId").and_then(Value::as_str) {
        Some(subject) => Ok(subject.to_owned()),
        None => Err(first_error_code(&body).unwrap_or_else(|| body.to_string())),
    })
}

fn tenant() -> String {
    format!("tenant-{}", uuid::Uuid::new_v4().simple())
}

async fn a_frontend_signed_in_with_a_provider_follows_a_task_live_across_a_key_rotation(
    db: TestDb,
) -> anyhow::Result<()> {
    let provider = JwksServer::start(&[TestKey::RsaA]).await?;
    let trust = trusting(&provider);
    let server = TestServer::start_with(&db.url, |settings| {
        trust(settings);
        settings.embedded_worker = true;
    })
    .await?;
    let tenant = tenant();
    let token = TestKey::RsaA.sign(&provider.claims("frontend-user", &tenant))?;
    let client = kfs_tests::server::GraphqlClient::new(server.graphql_url(), token.clone());
    let space =
        client.run("mutation { createKnowledgeSpace(input: { name: \"Signed in\" }) { id } }", json!({})).await?;
    let space = space.pointer("/createKnowledgeSpace/id").and_then(Value::as_str).context("no space")?.to_owned();
    client
        .run(
            "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }",
            json!({ "input": { "knowledgeSpaceId": space, "title": "Leases", "content": "A lease is a time-bounded claim on a job, renewed by heartbeats." } }),
        )
        .await?;
    // The subscription is opened before the task exists, as a frontend that navigates to
    // the task's page at once would; the task is created paused-free, so it may run at once.
    let created = client
        .run(
            "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }",
            json!({ "input": { "knowledgeSpaceId": space, "query": "What is a lease?", "mode": "FAST" } }),
        )
        .await?;
    let task = created.pointer("/createResearchTask/id").and_then(Value::as_str).context("no task")?.to_owned();
    let mut socket = WsClient::connect_and_init(&server.ws_url(), Some(&token)).await?;
    socket.subscribe("feed", PROGRESS, json!({ "task": task, "after": 0 })).await?;
    let events = tokio::time::timeout(Duration::from_secs(60), socket.collect("feed")).await??;
    let last = events.last().context("no progress arrived")?;
    ensure_eq!(last.pointer("/data/researchTaskProgress/stage"), Some(&json!("COMPLETED")), "{events:?}");
    socket.close().await?;

    // The provider rotates: the new key is published, the old one withdrawn. The next
    // token, naming the new kid, works without a restart; the old key no longer does.
    provider.publish(&[TestKey::RsaB])?;
    let fetched = provider.fetches();
    let rotated = TestKey::RsaB.sign(&provider.claims("frontend-user", &tenant))?;
    let read = kfs_tests::server::GraphqlClient::new(server.graphql_url(), rotated.clone())
        .run("query($id: UUID!) { researchTask(id: $id) { stage } }", json!({ "id": task }))
        .await?;
    ensure_eq!(read.pointer("/researchTask/stage"), Some(&json!("COMPLETED")), "the same user reads the task");
    ensure_eq!(provider.fetches(), fetched + 1, "the unknown kid fetched the set once");
    let mut socket = WsClient::connect_and_init(&server.ws_url(), Some(&rotated)).await?;
    socket.subscribe("again", PROGRESS, json!({ "task": task, "after": 0 })).await?;
    ensure!(!socket.collect("again").await?.is_empty(), "the rotated token follows the task over a WebSocket");
    ensure_eq!(viewer(&server, &token).await?, Err("UNAUTHENTICATED".to_owned()), "the withdrawn key");
    server.stop().await;
    Ok(())
}

async fn provider_tokens_are_checked_for_issuer_audience_algorithm_key_and_time(db: TestDb) -> anyhow::Result<()> {
    let provider = JwksServer::start(&[TestKey::RsaA, TestKey::Ec, TestKey::Ed]).await?;
    // A second provider naming its claims otherwise, as Auth0's namespaced ones are.
    let custom = JwksServer::start(&[TestKey::Ed]).await?;
    let custom_issuer = IssuerSettings {
        subject_claim: "uid".to_owned(),
        tenant_claim: "https://kfs.example/tenant".to_owned(),
        channel_claim: "https://kfs.example/channel".to_owned(),
        audience: vec!["other-app".to_owned(), "kfs-api".to_owned()],
        ..issuer(&custom)
    };
    let first = issuer(&provider);
    let server = TestServer::start_with(&db.url, move |settings| {
        settings.jwt_issuers = vec![first];
        settings.jwt.issuer = vec![custom_issuer];
        settings.jwt_leeway_seconds = 30;
        settings.jwks_timeout_ms = 500;
    })
    .await?;
    let tenant = tenant();
    let claims = provider.claims("user-1", &tenant);
    let now = chrono::Utc::now().timestamp();
    let with = |changes: Value| {
        let mut claims = claims.clone();
        if let Some(fields) = claims.as_object_mut() {
            for (key, value) in changes.as_object().into_iter().flatten() {
                match value {
                    Value::Null => fields.remove(key),
                    value => fields.insert(key.clone(), value.clone()),
                };
            }
        }
        claims
    };

    for key in [TestKey::RsaA, TestKey::Ec, TestKey::Ed] {
        ensure_eq!(viewer(&server, &key.sign(&claims)?).await?, Ok("user-1".to_owned()), "{key:?}");
    }
    let namespaced = json!({
        "iss": custom.issuer(), "aud": ["kfs-api"], "uid": "user-2", "https://kfs.example/tenant": tenant,
        "https://kfs.example/channel": "agent", "exp": now + 600,
    });
    let (_, body) = server.post(Some(&TestKey::Ed.sign(&namespaced)?), VIEWER, json!({})).await?;
    ensure_eq!(
        body["data"]["viewer"],
        json!({ "subjectId": "user-2", "tenantId": tenant, "channel": "AGENT" }),
        "{body}"
    );
    // Within the leeway on both sides: nbf 10 s ahead, exp 10 s past.
    ensure_eq!(
        viewer(&server, &TestKey::RsaA.sign(&with(json!({ "nbf": now + 10 })))?).await?,
        Ok("user-1".to_owned())
    );
    ensure_eq!(
        viewer(&server, &TestKey::RsaA.sign(&with(json!({ "exp": now - 10 })))?).await?,
        Ok("user-1".to_owned())
    );

    let confusion = {
        // The provider's public key used as an HS256 secret, with its kid and issuer.
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(TestKey::RsaA.kid().to_owned());
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(RSA_A_PUBLIC_PEM))?
    };
    let unsigned = {
        use base64::Engine as _;
        let part = |value: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string());
        format!("{}.{}.", part(&json!({ "alg": "none", "typ": "JWT" })), part(&claims))
    };
    let refused = [
        ("wrong audience", TestKey::RsaA.sign(&with(json!({ "aud": "someone-else" })))?),
        ("no audience", TestKey::RsaA.sign(&with(json!({ "aud": null })))?),
        ("an issuer nobody configured", TestKey::RsaA.sign(&with(json!({ "iss": "https://evil.example/" })))?),
        ("expired past the leeway", TestKey::RsaA.sign(&with(json!({ "exp": now - 120 })))?),
        ("not yet valid past the leeway", TestKey::RsaA.sign(&with(json!({ "nbf": now + 120 })))?),
        ("no expiry", TestKey::RsaA.sign(&with(json!({ "exp": null })))?),
        ("no tenant", TestKey::RsaA.sign(&with(json!({ "tenant": null })))?),
        ("the service channel", TestKey::RsaA.sign(&with(json!({ "channel": "service_api" })))?),
        ("a subject posing as a key", TestKey::RsaA.sign(&with(json!({ "sub": "api_key:123" })))?),
        ("HS256 with the public key as secret", confusion),
        ("alg none", unsigned),
        ("signed by one key, naming another", TestKey::RsaB.sign_as(TestKey::RsaA.kid(), &claims)?),
        ("an EC signature under the RSA kid", TestKey::Ec.sign_as(TestKey::RsaA.kid(), &claims)?),
        (
            "another provider's claims layout",
            TestKey::Ed.sign(&with(json!({ "iss": custom.issuer(), "aud": "kfs-api" })))?,
        ),
    ];
    for (what, token) in &refused {
        ensure_eq!(viewer(&server, token).await?, Err("UNAUTHENTICATED".to_owned()), "{what}");
        let mut socket = WsClient::connect(&server.ws_url(), "graphql-transport-ws").await?;
        socket
            .send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } }))
            .await?;
        let (code, _) = socket.expect_close(Duration::from_secs(10)).await?;
        ensure_eq!(code, 4403, "{what} over a WebSocket");
    }

    // Unknown kids: the first makes the server fetch the set again; the next ones, within
    // the refresh interval, do not.
    let before = provider.fetches();
    for kid in ["made-up-1", "made-up-2", "made-up-3"] {
        let token = TestKey::RsaA.sign_as(kid, &claims)?;
        ensure_eq!(viewer(&server, &token).await?, Err("UNAUTHENTICATED".to_owned()), "{kid}");
    }
    ensure_eq!(provider.fetches(), before + 1, "one refresh for a burst of unknown kids");
    server.stop().await;
    Ok(())
}

async fn a_provider_that_is_down_is_served_from_a_warm_cache_and_refused_promptly_when_cold(
    db: TestDb,
) -> anyhow::Result<()> {
    let provider = JwksServer::start(&[TestKey::RsaA]).await?;
    let tenant = tenant();
    let token = TestKey::RsaA.sign(&provider.claims("user-1", &tenant))?;
    let warm = TestServer::start_with(&db.url, trusting(&provider)).await?;
    ensure_eq!(viewer(&warm, &token).await?, Ok("user-1".to_owned()), "before the outage");
    for outage in [Outage::Status(503), Outage::Hang] {
        provider.outage(Some(outage));
        ensure_eq!(viewer(&warm, &token).await?, Ok("user-1".to_owned()), "warm cache, provider {outage:?}");
    }

    // A set past its age is refreshed in the background, once, however many requests see
    // it stale, and keeps serving while the provider hangs.
    provider.outage(None);
    let aging = TestServer::start_with(&db.url, |settings| {
        trusting(&provider)(settings);
        settings.jwks_max_age_seconds = 1;
    })
    .await?;
    ensure_eq!(viewer(&aging, &token).await?, Ok("user-1".to_owned()), "the first fetch");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    provider.outage(Some(Outage::Hang));
    let before_burst = provider.fetches();
    let burst = (0..20).map(|_| viewer(&aging, &token));
    for answer in futures_util::future::join_all(burst).await {
        ensure_eq!(answer?, Ok("user-1".to_owned()), "a stale set serves while the provider hangs");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    ensure_eq!(provider.fetches(), before_burst + 1, "one background refresh for the whole burst");
    aging.stop().await;
    provider.outage(Some(Outage::Hang));

    // A server that never saw the set, while the provider hangs: refused after the fetch
    // timeout (500 ms here), and the requests right after it without asking again.
    let cold = TestServer::start_with(&db.url, trusting(&provider)).await?;
    let fetches = provider.fetches();
    for attempt in 0..3 {
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(10), viewer(&cold, &token))
            .await
            .with_context(|| format!("attempt {attempt} hung on the provider"))??;
        ensure_eq!(answer, Err("UNAUTHENTICATED".to_owned()), "attempt {attempt}");
        eprintln!("identity: cold cache, provider hanging: attempt {attempt} refused in {:?}", started.elapsed());
    }
    ensure_eq!(provider.fetches(), fetches + 1, "a failed fetch is not retried at once");
    // Back up: the cold server recovers once the failure backoff has passed.
    provider.outage(None);
    kfs_tests::process::wait_until(Duration::from_secs(20), "the cold server to fetch the set", async || {
        Ok(viewer(&cold, &token).await?.is_ok())
    })
    .await?;
    warm.stop().await;
    cold.stop().await;
    Ok(())
}

async fn hs256_secrets_rotate_without_logging_anyone_out(db: TestDb) -> anyhow::Result<()> {
    // The test secret is now the previous one; a new one signs from here on.
    let server = TestServer::start_with(&db.url, |settings| {
        settings.jwt_secret = SecretString::from("the-new-secret-after-rotation-0123456789");
        settings.jwt_previous_secrets = vec![SecretString::from(kfs_tests::server::TEST_JWT_SECRET)];
    })
    .await?;
    let tenant = tenant();
    let old = TestServer::token("alice", &tenant);
    let claims = api::auth::Claims {
        sub: "alice".to_owned(),
        tenant: tenant.clone(),
        channel: None,
        exp: chrono::Utc::now().timestamp() + 600,
    };
    let new = api::auth::mint_token(&SecretString::from("the-new-secret-after-rotation-0123456789"), &claims)?;
    let stranger = api::auth::mint_token(&SecretString::from("a-secret-nobody-configured-0123456789"), &claims)?;
    ensure_eq!(viewer(&server, &old).await?, Ok("alice".to_owned()), "a token signed before the rotation");
    ensure_eq!(viewer(&server, &new).await?, Ok("alice".to_owned()), "a token signed after it");
    ensure_eq!(viewer(&server, &stranger).await?, Err("UNAUTHENTICATED".to_owned()), "any other secret");
    let socket = WsClient::connect_and_init(&server.ws_url(), Some(&old)).await?;
    socket.close().await?;
    server.stop().await;
    Ok(())
}
