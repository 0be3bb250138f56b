//! Documents through the API: formats, passages whose ranges map back to the content,
//! updates and removals that re-index in their own transaction, roles, paging, the content
//! limit at full size, and evidence that names passages (and survives the document).
use anyhow::{Context as _, ensure};
use entity::knowledge_passage as passage;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use uuid::Uuid;
use worker::knowledge::retrieve::Retriever;
use worker::knowledge::search::Scope;

use crate::api_support::{Api, string_at};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        documents_are_split_into_passages_whose_ranges_map_back_to_the_content,
        an_update_re_splits_and_a_removed_document_is_never_retrieved_again,
        writers_write_readers_read_and_outsiders_see_nothing,
        documents_page_through_a_connection,
        the_largest_document_is_accepted_and_split,
        evidence_names_passages_by_exact_range_and_outlives_the_document,
        documents_stored_before_passages_are_split_on_the_first_start,
        an_excerpt_reads_one_range_of_one_revision,
    ]
}

pub const ADD: &str = "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { \
    id revision mediaType sourceUri metadata indexingStatus indexingError createdBy updatedBy } }";
const UPDATE: &str = "mutation($id: UUID!, $input: UpdateKnowledgeDocumentInput!, $rev: Int) { \
    updateKnowledgeDocument(id: $id, input: $input, expectedRevision: $rev) { id title revision mediaType sourceUri updatedBy } }";
const REMOVE: &str = "mutation($id: UUID!) { removeKnowledgeDocument(id: $id) }";
const PASSAGES: &str = "query($space: UUID!, $after: Int) { knowledgeSpace(id: $space) { documents(first: 5) { id content \
    passages(first: 100, afterOrdinal: $after) { id documentId ordinal charStart charEnd headingPath text tokenCount } } } }";

/// Adds a document as `bearer`; returns its id.
pub async fn add(
    api: &Api,
    bearer: &str,
    space: &str,
    title: &str,
    content: &str,
    media: &str,
) -> anyhow::Result<String> {
    let input = json!({ "knowledgeSpaceId": space, "title": title, "content": content, "mediaType": media });
    let data = api.data(Some(bearer), ADD, json!({ "input": input })).await?;
    string_at(&data, "/addKnowledgeDocument/id")
}

/// The code points `start..end` of `content`.
pub fn slice(content: &str, start: i64, end: i64) -> String {
    let (start, end) = (usize::try_from(start).unwrap_or(0), usize::try_from(end).unwrap_or(0));
    content.chars().skip(start).take(end.saturating_sub(start)).collect()
}

/// The words of a text, for comparing extracted text with its markup.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect()
}

/// Full-text retrieval in the space as research runs it: the passages' document ids.
async fn retrieved(db: &TestDb, tenant: &str, space: &str, query: &str) -> anyhow::Result<Vec<Uuid>> {
    let scope = Scope::space(tenant, space.parse()?);
    let found = Retriever::full_text().search(&db.db, scope, query, 50).await?;
    Ok(found.into_iter().map(|found| found.document_id).collect())
}

async fn documents_are_split_into_passages_whose_ranges_map_back_to_the_content(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let markdown = "# Guide\n\nIntro paragraph about the Zürich office ☕.\n\n## Backups\n\nSnapshots are kept for *35 days* in `s3`.\n\n- first item\n- second item\n";
    let html = "<html><head><style>p{}</style><script>var secret = 1;</script></head><body><h1>Über</h1>\
        <p>Caf&eacute; opening hours are <b>9 to 5</b>.</p><ul><li>Tea</li><li>Coffee</li></ul></body></html>";
    let plain = "First paragraph, line one\nline two.\n\n\n  Second paragraph — with a dash.  \n";
    let input = json!({ "knowledgeSpaceId": space, "title": "Guide", "content": markdown, "mediaType": "TEXT_MARKDOWN",
        "sourceUri": "https://wiki.example/guide", "metadata": { "team": "ops" } });
    let added = api.data(Some(&token), ADD, json!({ "input": input })).await?;
    let document = &added["addKnowledgeDocument"];
    ensure!(document["mediaType"] == "TEXT_MARKDOWN" && document["revision"] == 1, "{added}");
    ensure!(document["sourceUri"] == "https://wiki.example/guide" && document["metadata"]["team"] == "ops", "{added}");
    ensure!(document["indexingStatus"] == "READY" && document["indexingError"].is_null(), "no embeddings: {added}");
    add(&api, &token, &space, "Hours", html, "TEXT_HTML").await?;
    let plain_input = json!({ "knowledgeSpaceId": space, "title": "Plain", "content": plain });
    let plain_added = api.data(Some(&token), ADD, json!({ "input": plain_input })).await?;
    ensure!(plain_added["addKnowledgeDocument"]["mediaType"] == "TEXT_PLAIN", "the default: {plain_added}");

    let data = api.data(Some(&token), PASSAGES, json!({ "space": space })).await?;
    let documents = data["knowledgeSpace"]["documents"].as_array().context("documents")?;
    ensure_eq!(documents.len(), 3);
    for document in documents {
        let content = document["content"].as_str().context("content")?;
        let passages = document["passages"].as_array().context("passages")?;
        ensure!(!passages.is_empty(), "no passages for {document}");
        for (ordinal, passage) in passages.iter().enumerate() {
            ensure_eq!(passage["ordinal"].as_i64(), Some(ordinal as i64));
            ensure_eq!(passage["documentId"], document["id"]);
            let (start, end) = (passage["charStart"].as_i64().unwrap_or(-1), passage["charEnd"].as_i64().unwrap_or(-1));
            ensure!(0 <= start && start < end && end <= content.chars().count() as i64, "range of {passage}");
            let text = passage["text"].as_str().context("text")?;
            let source = slice(content, start, end);
            // Every word of the extracted text comes from the range, in order.
            let source_words = words(&source.replace("&eacute;", "é"));
            let mut rest = source_words.iter();
            for word in words(text) {
                ensure!(
                    rest.any(|candidate| *candidate == word),
                    "{word:?} of {text:?} is not in its range {source:?}"
                );
            }
        }
    }
    let by_title =
        |title: &str| documents.iter().find(|d| d["passages"][0]["text"].as_str().is_some_and(|t| t.contains(title)));
    let backups = documents
        .iter()
        .flat_map(|d| d["passages"].as_array().cloned().unwrap_or_default())
        .find(|p| p["text"].as_str().is_some_and(|t| t.contains("35 days")))
        .context("the backups passage")?;
    ensure_eq!(backups["headingPath"], json!(["Guide", "Backups"]));
    ensure!(!backups["text"].as_str().unwrap_or_default().contains('*'), "markup stays out of the text: {backups}");
    let cafe = by_title("Café").context("the HTML passage")?;
    ensure!(!cafe["passages"].to_string().contains("secret"), "scripts are not text: {cafe}");
    ensure!(!cafe["passages"].to_string().contains("p{}"), "styles are not text: {cafe}");
    ensure!(by_title("First paragraph, line one line two.").is_some(), "plain text is its whitespace-collapsed slice");
    api.stop().await;
    Ok(())
}

async fn an_update_re_splits_and_a_removed_document_is_never_retrieved_again(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = add(&api, &token, &space, "Tides", "Spring tides follow the full moon.", "TEXT_PLAIN").await?;
    let other = add(&api, &token, &space, "Bread", "Sourdough needs a starter.", "TEXT_PLAIN").await?;
    let old_passages: Vec<Uuid> = passage::Entity::find()
        .filter(passage::Column::DocumentId.eq(id.parse::<Uuid>()?))
        .all(&db.db)
        .await?
        .into_iter()
        .map(|row| row.id)
        .collect();
    ensure!(retrieved(&db, &api.tenant, &space, "spring tides").await?.contains(&id.parse()?));

    let input = json!({ "title": "Neap tides", "content": "# Neap\n\nNeap tides come with the half moon.", "mediaType": "TEXT_MARKDOWN" });
    let stale = api.code(Some(&token), UPDATE, json!({ "id": id, "input": input, "rev": 7 })).await?;
    ensure_eq!(stale.as_str(), "CONFLICT");
    let updated = api.data(Some(&token), UPDATE, json!({ "id": id, "input": input, "rev": 1 })).await?;
    let document = &updated["updateKnowledgeDocument"];
    ensure!(
        document["revision"] == 2 && document["title"] == "Neap tides" && document["updatedBy"] == "alice",
        "{updated}"
    );
    ensure!(document["mediaType"] == "TEXT_MARKDOWN", "{updated}");
    let rows = passage::Entity::find().filter(passage::Column::DocumentId.eq(id.parse::<Uuid>()?)).all(&db.db).await?;
    ensure!(
        !rows.is_empty() && rows.iter().all(|row| row.document_revision == 2 && !old_passages.contains(&row.id)),
        "{rows:?}"
    );
    ensure!(retrieved(&db, &api.tenant, &space, "spring full").await?.is_empty(), "the old text is not searchable");
    ensure!(retrieved(&db, &api.tenant, &space, "neap half").await? == [id.parse::<Uuid>()?], "the new text is");
    let cleared = api.data(Some(&token), UPDATE, json!({ "id": id, "input": { "sourceUri": "" } })).await?;
    ensure!(
        cleared["updateKnowledgeDocument"]["sourceUri"].is_null()
            && cleared["updateKnowledgeDocument"]["revision"] == 3,
        "{cleared}"
    );

    let removed = api.data(Some(&token), REMOVE, json!({ "id": id })).await?;
    ensure_eq!(removed["removeKnowledgeDocument"], json!(true));
    ensure_eq!(
        passage::Entity::find().filter(passage::Column::DocumentId.eq(id.parse::<Uuid>()?)).count(&db.db).await?,
        0
    );
    ensure!(
        retrieved(&db, &api.tenant, &space, "neap tides half moon").await?.is_empty(),
        "a removed document is never retrieved"
    );
    let again = api.data(Some(&token), REMOVE, json!({ "id": id })).await?;
    ensure_eq!(again["removeKnowledgeDocument"], json!(false), "removing twice");
    ensure_eq!(
        api.code(Some(&token), UPDATE, json!({ "id": id, "input": { "title": "x" } })).await?.as_str(),
        "NOT_FOUND"
    );
    ensure!(
        retrieved(&db, &api.tenant, &space, "sourdough").await? == [other.parse::<Uuid>()?],
        "the other document stays"
    );
    api.stop().await;
    Ok(())
}

async fn writers_write_readers_read_and_outsiders_see_nothing(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("owner").await?;
    api.member("owner", &space, "editor", "EDITOR").await?;
    api.member("owner", &space, "viewer", "VIEWER").await?;
    let id =
        add(&api, &api.token("editor"), &space, "Editor's", "Written by an editor about lighthouses.", "TEXT_PLAIN")
            .await?;
    let (_, secret) = api.key("owner", &space).await?;
    let input = json!({ "knowledgeSpaceId": space, "title": "t", "content": "c" });
    for (who, bearer) in [("viewer", api.token("viewer")), ("api key", secret.clone())] {
        ensure_eq!(api.code(Some(&bearer), ADD, json!({ "input": input })).await?.as_str(), "FORBIDDEN", "{who} adds");
        let code = api.code(Some(&bearer), UPDATE, json!({ "id": id, "input": { "title": "t" } })).await?;
        ensure_eq!(code.as_str(), "FORBIDDEN", "{who} updates");
        ensure_eq!(api.code(Some(&bearer), REMOVE, json!({ "id": id })).await?.as_str(), "FORBIDDEN", "{who} removes");
        let read = api.data(Some(&bearer), PASSAGES, json!({ "space": space })).await?;
        ensure!(
            read["knowledgeSpace"]["documents"][0]["passages"][0]["text"] == "Written by an editor about lighthouses.",
            "{who} reads: {read}"
        );
    }
    // Another tenant, and a subject of this tenant with no membership: exactly as a missing id.
    let outsiders = [kfs_tests::server::TestServer::token("owner", "another-tenant"), api.token("stranger")];
    let missing = Uuid::now_v7().to_string();
    for bearer in &outsiders {
        for target in [&id, &missing] {
            ensure_eq!(
                api.code(Some(bearer), UPDATE, json!({ "id": target, "input": { "title": "t" } })).await?.as_str(),
                "NOT_FOUND"
            );
            let removed = api.data(Some(bearer), REMOVE, json!({ "id": target })).await?;
            ensure_eq!(removed["removeKnowledgeDocument"], json!(false), "as for a missing id");
        }
        ensure_eq!(api.code(Some(bearer), ADD, json!({ "input": input })).await?.as_str(), "NOT_FOUND");
        let read = api
            .data(Some(bearer), "query($id: UUID!) { knowledgeDocument(id: $id) { id } }", json!({ "id": id }))
            .await?;
        ensure!(read["knowledgeDocument"].is_null(), "{read}");
    }
    let edited =
        api.data(Some(&api.token("owner")), UPDATE, json!({ "id": id, "input": { "title": "Owner's" } })).await?;
    ensure!(edited["updateKnowledgeDocument"]["updatedBy"] == "owner", "{edited}");
    ensure!(
        api.data(Some(&api.token("editor")), REMOVE, json!({ "id": id })).await?["removeKnowledgeDocument"]
            == json!(true)
    );
    let gone = api
        .data(
            Some(&api.token("editor")),
            "query($id: UUID!) { knowledgeDocument(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await?;
    ensure!(gone["knowledgeDocument"].is_null(), "{gone}");
    api.stop().await;
    Ok(())
}

async fn documents_page_through_a_connection(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let mut added = Vec::new();
    for n in 0..5 {
        added.push(add(&api, &token, &space, &format!("doc {n}"), &format!("content number {n}"), "TEXT_PLAIN").await?);
    }
    added.reverse();
    let page = "query($s: UUID!, $a: String) { knowledgeSpace(id: $s) { documents(first: 2) { id } \
        documentsConnection(first: 2, after: $a) { edges { cursor node { id title } } pageInfo { hasNextPage endCursor } } } }";
    let mut seen = Vec::new();
    let mut after = Value::Null;
    loop {
        let data = api.data(Some(&token), page, json!({ "s": space, "a": after })).await?;
        let space_data = &data["knowledgeSpace"];
        ensure_eq!(space_data["documents"].as_array().map(Vec::len), Some(2), "the plain list still works");
        let connection = &space_data["documentsConnection"];
        for edge in connection["edges"].as_array().context("edges")? {
            seen.push(string_at(edge, "/node/id")?);
        }
        if connection["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = connection["pageInfo"]["endCursor"].clone();
    }
    ensure_eq!(seen, added, "newest first, each once");
    api.stop().await;
    Ok(())
}

async fn the_largest_document_is_accepted_and_split(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    // Exactly 5 MiB of UTF-8 with quotes, newlines and three-byte characters, so the JSON
    // body is larger still; paragraphs of varied sentences.
    let paragraph = "The \"quick\" fox — naïve, 東京 — jumps.\nIt lands.\n\n";
    let limit = 5 * 1024 * 1024;
    let mut content = paragraph.repeat(limit / paragraph.len());
    while content.len() < limit {
        content.push('x');
    }
    ensure_eq!(content.len(), limit);
    let id = add(&api, &token, &space, "Big", &content, "TEXT_PLAIN").await?;
    let count =
        passage::Entity::find().filter(passage::Column::DocumentId.eq(id.parse::<Uuid>()?)).count(&db.db).await?;
    ensure!(count > 1_000, "{count} passages");
    let last = api.data(Some(&token), PASSAGES, json!({ "space": space, "after": count - 2 })).await?;
    let tail = &last["knowledgeSpace"]["documents"][0]["passages"];
    ensure_eq!(tail.as_array().map(Vec::len), Some(1), "{tail}");
    ensure_eq!(tail[0]["charEnd"].as_i64(), Some(content.chars().count() as i64), "the last passage ends the content");
    api.stop().await;
    Ok(())
}

async fn evidence_names_passages_by_exact_range_and_outlives_the_document(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.embedded_worker = true).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let content = "# Lighthouses\n\nA lighthouse keeper trims the wick at dusk.\n\n## Fog\n\n\
        In fog the keeper sounds the horn every thirty seconds, and logs each hour.\n";
    let id = add(&api, &token, &space, "Keeping a light", content, "TEXT_MARKDOWN").await?;
    add(&api, &token, &space, "Bread", "Sourdough needs a starter and patience.", "TEXT_PLAIN").await?;
    let create = "mutation($s: UUID!) { createResearchTask(input: {knowledgeSpaceId: $s, query: \"What does the keeper do in fog?\"}) { id } }";
    let task = string_at(&api.data(Some(&token), create, json!({ "s": space })).await?, "/createResearchTask/id")?;
    let read = "query($id: UUID!) { researchTask(id: $id) { stage answerTrace { answer evidence } \
        partialResults(first: 100) { evidenceBundle } } }";
    kfs_tests::process::wait_until(std::time::Duration::from_secs(60), "the task to complete", async || {
        let data = api.data(Some(&token), read, json!({ "id": task })).await?;
        Ok(data["researchTask"]["stage"] == "COMPLETED")
    })
    .await?;
    let before = api.data(Some(&token), read, json!({ "id": task })).await?;
    let evidence = before["researchTask"]["answerTrace"]["evidence"].as_array().cloned().context("evidence")?;
    let fog = evidence
        .iter()
        .find(|item| item["text"].as_str().is_some_and(|t| t.contains("horn")))
        .context("the fog passage")?;
    ensure_eq!(fog["document_id"], json!(id));
    ensure!(fog["passage_id"].is_string() && fog["citation"].is_number() && fog["snippet"] == fog["text"], "{fog}");
    let (start, end) =
        (fog["char_start"].as_i64().context("char_start")?, fog["char_end"].as_i64().context("char_end")?);
    ensure_eq!(
        slice(content, start, end),
        "In fog the keeper sounds the horn every thirty seconds, and logs each hour.",
        "the range is exactly the passage's source"
    );
    ensure!(fog["rankers"][0]["ranker"] == "full_text" && fog["rankers"][0]["rank"].is_number(), "{fog}");
    ensure_eq!(fog["heading_path"], json!(["Lighthouses", "Fog"]));

    api.data(Some(&token), REMOVE, json!({ "id": id })).await?;
    let after = api.data(Some(&token), read, json!({ "id": task })).await?;
    ensure_eq!(after, before, "evidence already written keeps its text after the document goes");
    api.stop().await;
    Ok(())
}

/// A database from before passages: migrated up to m0016, with a document written as the
/// old code wrote it. Migrating and starting the server splits it, so it stays searchable.
async fn documents_stored_before_passages_are_split_on_the_first_start(db: TestDb) -> anyhow::Result<()> {
    use migration::{Migrator, MigratorTrait as _};
    use sea_orm::Value as Bound;
    let old = db.empty_sibling().await?;
    let passages_migration = Migrator::migrations().iter().position(|m| m.name() == "m0017_knowledge_passages");
    Migrator::up(&old.db, Some(u32::try_from(passages_migration.context("no passages migration")?)?)).await?;
    let (space, document) = (Uuid::now_v7(), Uuid::now_v7());
    let now = entity::now_millis();
    old.exec(
        "INSERT INTO knowledge_spaces (id, tenant_id, name, created_at, updated_at) VALUES ($1, 'acme', 'Old', $2, $2)",
        [Bound::from(space), Bound::from(now)],
    )
    .await?;
    old.exec(
        "INSERT INTO knowledge_documents (id, tenant_id, knowledge_space_id, title, content, created_by, created_at, updated_at) \
         VALUES ($1, 'acme', $2, 'Tides', 'Spring tides follow the full moon.\n\nNeap tides follow the half moon.', 'alice', $3, $3)",
        [Bound::from(document), Bound::from(space), Bound::from(now)],
    )
    .await?;
    let server = kfs_tests::server::TestServer::start(&old.url, false).await?;
    let stored =
        entity::knowledge_document::Entity::find_by_id(document).one(&old.db).await?.context("the document")?;
    ensure!(
        stored.indexed_revision == Some(1) && stored.indexing_status == entity::IndexingStatus::Ready,
        "{stored:?}"
    );
    ensure!(stored.media_type == entity::MediaType::TextPlain && stored.revision == 1, "{stored:?}");
    let scope = Scope::space("acme", space);
    let found = Retriever::full_text().search(&old.db, scope, "neap", 10).await?;
    ensure!(found.len() == 1 && found[0].document_id == document, "{found:?}");
    // Two short paragraphs under no heading make one passage.
    ensure_eq!(slice(&stored.content, i64::from(found[0].char_start), i64::from(found[0].char_end)), stored.content);
    server.stop().await;
    // Starting again splits nothing twice.
    let again =
        worker::app::startup::prepare(&old.db, &Default::default(), &Default::default(), entity::now_millis()).await?;
    ensure_eq!(again.split, 0);
    Ok(())
}

/// `KnowledgeDocument.excerpt`: a range of the content in code points (at most 20,000),
/// checked against the revision it indexes.
async fn an_excerpt_reads_one_range_of_one_revision(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let content = format!("Zürich ☕ opens at 9. {}", "x".repeat(25_000));
    let id = add(&api, &token, &space, "Long", &content, "TEXT_PLAIN").await?;
    let excerpt = "query($id: UUID!, $s: Int!, $e: Int!, $r: Int) { knowledgeDocument(id: $id) { \
        excerpt(charStart: $s, charEnd: $e, revision: $r) } }";
    let read = |start: i64, end: i64, revision: Option<i64>| json!({ "id": id, "s": start, "e": end, "r": revision });
    let data = api.data(Some(&token), excerpt, read(0, 8, Some(1))).await?;
    ensure_eq!(data["knowledgeDocument"]["excerpt"], json!("Zürich ☕"), "code points, not bytes");
    let data = api.data(Some(&token), excerpt, read(3, 3, None)).await?;
    ensure_eq!(data["knowledgeDocument"]["excerpt"], json!(""), "an empty range is empty");
    let data = api.data(Some(&token), excerpt, read(100, 20_100, None)).await?;
    let longest = data["knowledgeDocument"]["excerpt"].as_str().context("excerpt")?;
    ensure_eq!(longest.chars().count(), 20_000);
    let total = i64::try_from(content.chars().count())?;
    ensure_eq!(
        api.data(Some(&token), excerpt, read(total - 2, total, None)).await?["knowledgeDocument"]["excerpt"],
        json!("xx")
    );
    for (what, variables) in [
        ("longer than 20,000", read(0, 20_001, None)),
        ("inverted", read(10, 9, None)),
        ("negative", read(-1, 5, None)),
        ("past the end", read(total - 1, total + 1, None)),
    ] {
        ensure_eq!(api.code(Some(&token), excerpt, variables).await?, "BAD_USER_INPUT", "{what}");
    }
    ensure_eq!(api.code(Some(&token), excerpt, read(0, 5, Some(2))).await?, "CONFLICT", "another revision");
    // Another subject's document answers as a missing one, excerpt and all.
    let data = api.data(Some(&api.token("mallory")), excerpt, read(0, 5, None)).await?;
    ensure!(data["knowledgeDocument"].is_null(), "{data}");
    api.stop().await;
    Ok(())
}
