//! Metadata filters: a task's `filters` (or `limits.filters`) bound which documents its
//! evidence comes from, in full-text and vector search alike; conditions combine; JSON
//! equality keeps types; a filter that matches nothing answers without evidence; bad
//! filters are BAD_USER_INPUT; MCP's `search`, `start_research` and `research` take the
//! same filters.
use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kfs_tests::process::wait_until;
use kfs_tests::server::TestServer;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::{Api, string_at};

pub fn tests() -> Vec<DbTest> {
    db_tests![filters_bound_the_evidence_by_metadata_type_id_and_date, filters_hold_for_vector_search_and_for_mcp_tools,]
}

const CREATE: &str = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id limits } }";

/// A server whose embedded worker runs tasks.
async fn api_with_worker(db: &TestDb) -> anyhow::Result<Api> {
    let server = TestServer::start_with(&db.url, |settings| settings.embedded_worker = true).await?;
    Ok(Api { server, tenant: format!("tenant-{}", Uuid::new_v4().simple()) })
}

/// Adds a document about tides with `metadata`; returns its id and creation time.
async fn add(
    api: &Api,
    token: &str,
    space: &str,
    title: &str,
    media: &str,
    metadata: Value,
) -> anyhow::Result<(String, String)> {
    let content = match media {
        "TEXT_HTML" => format!("<p>Tides notes kept by {title}.</p>"),
        _ => format!("Tides notes kept by {title}."),
    };
    let input = json!({ "knowledgeSpaceId": space, "title": title, "content": content, "mediaType": media, "metadata": metadata });
    let data = api
        .data(
            Some(token),
            "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id createdAt } }",
            json!({ "input": input }),
        )
        .await?;
    Ok((string_at(&data, "/addKnowledgeDocument/id")?, string_at(&data, "/addKnowledgeDocument/createdAt")?))
}

/// Runs a task with `extra` input fields; returns the titles its evidence comes from.
async fn evidence_titles(api: &Api, token: &str, space: &str, extra: Value) -> anyhow::Result<BTreeSet<String>> {
    let mut input = json!({ "knowledgeSpaceId": space, "query": "What do the tides notes say?", "mode": "FAST", "topK": 20, "metadata": {} });
    for (key, value) in extra.as_object().context("extra fields")? {
        input[key] = value.clone();
    }
    let created = api.data(Some(token), CREATE, json!({ "input": input })).await?;
    let task = string_at(&created, "/createResearchTask/id")?;
    let mut seen = Value::Null;
    wait_until(Duration::from_secs(60), "the task to complete", async || {
        let data = api
            .data(
                Some(token),
                "query($id: UUID!) { researchTask(id: $id) { stage answerTrace { answer evidence } } }",
                json!({ "id": task }),
            )
            .await?;
        seen = data["researchTask"].clone();
        Ok(seen["stage"] == "COMPLETED" || seen["stage"] == "FAILED")
    })
    .await?;
    ensure!(seen["stage"] == "COMPLETED", "{seen}");
    let evidence = seen.pointer("/answerTrace/evidence").and_then(Value::as_array).cloned().unwrap_or_default();
    Ok(evidence.iter().filter_map(|item| item["title"].as_str().map(str::to_owned)).collect())
}

fn titles(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

async fn filters_bound_the_evidence_by_metadata_type_id_and_date(db: TestDb) -> anyhow::Result<()> {
    let api = api_with_worker(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    add(&api, &token, &space, "alpha", "TEXT_PLAIN", json!({ "team": "ops", "year": 2024 })).await?;
    add(&api, &token, &space, "bravo", "TEXT_PLAIN", json!({ "team": ["dev", "ops"], "year": "2024" })).await?;
    let (charlie, charlie_at) =
        add(&api, &token, &space, "charlie", "TEXT_MARKDOWN", json!({ "team": "dev", "year": 2023 })).await?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    add(&api, &token, &space, "delta", "TEXT_HTML", json!({ "public": true })).await?;
    add(&api, &token, &space, "echo", "TEXT_PLAIN", json!({ "public": 1 })).await?;

    ensure_eq!(
        evidence_titles(&api, &token, &space, json!({})).await?,
        titles(&["alpha", "bravo", "charlie", "delta", "echo"])
    );
    let cases = [
        (json!({ "filters": { "metadata": { "team": "ops" } } }), titles(&["alpha", "bravo"])),
        (json!({ "filters": { "metadata": { "year": 2024 } } }), titles(&["alpha"])),
        (json!({ "filters": { "metadata": { "year": "2024" } } }), titles(&["bravo"])),
        (json!({ "filters": { "metadata": { "team": ["dev", "nobody"] } } }), titles(&["bravo", "charlie"])),
        (json!({ "filters": { "metadata": { "team": "ops", "year": 2024 } } }), titles(&["alpha"])),
        (json!({ "filters": { "metadata": { "public": true } } }), titles(&["delta"])),
        (json!({ "filters": { "mediaTypes": ["TEXT_HTML", "TEXT_MARKDOWN"] } }), titles(&["charlie", "delta"])),
        (json!({ "filters": { "documentIds": [charlie] } }), titles(&["charlie"])),
        (json!({ "filters": { "createdAfter": charlie_at } }), titles(&["charlie", "delta", "echo"])),
        (json!({ "filters": { "createdBefore": charlie_at } }), titles(&["alpha", "bravo"])),
        (json!({ "limits": { "filters": { "metadata": { "team": "dev" } } } }), titles(&["bravo", "charlie"])),
        (json!({ "filters": { "metadata": { "team": "nobody" } } }), titles(&[])),
    ];
    for (extra, expected) in cases {
        let found = evidence_titles(&api, &token, &space, extra.clone()).await?;
        ensure!(found == expected, "{extra}: evidence from {found:?}, expected {expected:?}");
    }
    // What is stored: the filters under limits, in the input's shape.
    let input = json!({ "knowledgeSpaceId": space, "query": "tides", "filters": { "metadata": { "team": "ops" }, "mediaTypes": ["TEXT_PLAIN"] } });
    let created = api.data(Some(&token), CREATE, json!({ "input": input })).await?;
    ensure_eq!(
        created["createResearchTask"]["limits"]["filters"],
        json!({ "metadata": { "team": "ops" }, "mediaTypes": ["TEXT_PLAIN"] })
    );

    // Bad filters, and filters given twice, are BAD_USER_INPUT naming what is wrong.
    for (input, says) in [
        (json!({ "filters": { "metadata": { "team": { "nested": 1 } } } }), "limits.filters"),
        (json!({ "filters": { "metadata": { "team": [] } } }), "limits.filters"),
        (json!({ "limits": { "filters": { "mediaTypes": ["IMAGE_PNG"] } } }), "limits.filters"),
        (json!({ "limits": { "filters": { "colour": "red" } } }), "limits.filters"),
        (json!({ "limits": { "filters": [] } }), "limits.filters"),
        (
            json!({ "filters": { "metadata": { "a": 1 } }, "limits": { "filters": { "metadata": { "a": 2 } } } }),
            "twice",
        ),
    ] {
        let mut full = json!({ "knowledgeSpaceId": space, "query": "tides" });
        for (key, value) in input.as_object().context("input")? {
            full[key] = value.clone();
        }
        let body = api.call(Some(&token), CREATE, json!({ "input": full })).await?;
        ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("BAD_USER_INPUT"), "{input}");
        ensure!(body.to_string().contains(says), "{input}: {body}");
    }
    api.stop().await;
    Ok(())
}

async fn filters_hold_for_vector_search_and_for_mcp_tools(db: TestDb) -> anyhow::Result<()> {
    use sea_orm::{ActiveValue::Set, ColumnTrait as _, EntityTrait as _, QueryFilter as _};
    let api = api_with_worker(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let (ops, _) = add(&api, &token, &space, "ops-notes", "TEXT_PLAIN", json!({ "team": "ops" })).await?;
    let (dev, _) = add(&api, &token, &space, "dev-notes", "TEXT_PLAIN", json!({ "team": "dev" })).await?;

    // Vectors: every passage gets one; a filtered scope reads only its documents'.
    let space_id: Uuid = space.parse()?;
    let passages = entity::knowledge_passage::Entity::find()
        .filter(entity::knowledge_passage::Column::KnowledgeSpaceId.eq(space_id))
        .all(&db.db)
        .await?;
    for passage in &passages {
        let row = entity::knowledge_passage_embedding::ActiveModel {
            passage_id: Set(passage.id),
            tenant_id: Set(passage.tenant_id.clone()),
            knowledge_space_id: Set(space_id),
            model: Set("test-model".to_owned()),
            dimensions: Set(2),
            vector: Set(worker::knowledge::vectors::to_le_bytes(&[1.0, 0.0])),
            created_at: Set(entity::now_millis()),
        };
        entity::knowledge_passage_embedding::Entity::insert(row).exec_without_returning(&db.db).await?;
    }
    let filters: entity::DocumentFilters =
        entity::TaskLimits::parse(&json!({ "filters": { "metadata": { "team": "ops" } } }))?
            .filters
            .context("filters")?;
    let allowed = worker::store::filtered::matching(&db.db, &api.tenant, space_id, &filters).await?;
    ensure_eq!(allowed, vec![ops.parse::<Uuid>()?]);
    let scope = worker::store::passages::Scope {
        tenant_id: &api.tenant,
        knowledge_space_id: space_id,
        documents: Some(&allowed),
    };
    let vectors = worker::store::passages::vectors(&db.db, scope, "test-model", 2, 100).await?;
    let of_ops: Vec<Uuid> = passages.iter().filter(|p| p.document_id.to_string() == ops).map(|p| p.id).collect();
    ensure!(
        !vectors.is_empty() && vectors.iter().all(|vector| of_ops.contains(&vector.passage_id)),
        "vectors outside the filter"
    );
    let unfiltered = worker::store::passages::vectors(
        &db.db,
        worker::store::passages::Scope::space(&api.tenant, space_id),
        "test-model",
        2,
        100,
    )
    .await?;
    ensure_eq!(unfiltered.len(), passages.len());

    // MCP: search, start_research and research take the same filters.
    let mcp_token = TestServer::token_with("alice", &api.tenant, Some("mcp"), entity::now_millis() / 1000 + 3600);
    let searched = crate::mcp_endpoint::call(
        &api,
        &mcp_token,
        "search",
        json!({ "query": "tides notes", "space_id": space, "filters": { "metadata": { "team": "dev" } } }),
    )
    .await?;
    let results = searched["result"]["structuredContent"]["results"].as_array().cloned().unwrap_or_default();
    ensure!(!results.is_empty() && results.iter().all(|result| result["title"] == "dev-notes"), "{searched}");
    let refused = crate::mcp_endpoint::call(
        &api,
        &mcp_token,
        "search",
        json!({ "query": "tides", "filters": { "mediaTypes": ["IMAGE_PNG"] } }),
    )
    .await?;
    let text = refused["result"]["content"][0]["text"].as_str().unwrap_or_default();
    ensure!(refused["result"]["isError"] == true && text.starts_with("BAD_USER_INPUT: filters"), "{refused}");
    let started = crate::mcp_endpoint::call(&api, &mcp_token, "start_research", json!({ "space_id": space, "question": "What do the tides notes say?", "mode": "fast", "filters": { "documentIds": [dev] } })).await?;
    let task = started["result"]["structuredContent"]["task_id"].as_str().context("no task")?.to_owned();
    let mut answer = Value::Null;
    wait_until(Duration::from_secs(60), "the MCP task to complete", async || {
        answer = crate::mcp_endpoint::call(&api, &mcp_token, "get_research", json!({ "task_id": task })).await?;
        Ok(answer["result"]["structuredContent"]["stage"] == "completed")
    })
    .await?;
    let citations = answer["result"]["structuredContent"]["citations"].as_array().cloned().unwrap_or_default();
    ensure!(
        !citations.is_empty() && citations.iter().all(|citation| citation["document_id"] == json!(dev)),
        "{answer}"
    );
    let researched = crate::mcp_endpoint::call(&api, &mcp_token, "research", json!({ "space_id": space, "question": "What do the tides notes say?", "mode": "fast", "filters": { "metadata": { "team": "ops" } } })).await?;
    let citations = researched["result"]["structuredContent"]["citations"].as_array().cloned().unwrap_or_default();
    ensure!(
        !citations.is_empty() && citations.iter().all(|citation| citation["document_id"] == json!(ops)),
        "{researched}"
    );
    api.stop().await;
    Ok(())
}
