//! The store's knowledge operations, on both backends: full-text search (tsvector or FTS5),
//! the same search for several queries at once, passages by id, stored vectors, and the
//! embedding backlog's lease, fenced writes and reconciliation.
use anyhow::Context as _;
use entity::{IndexingStatus, MediaType, knowledge_passage_embedding as embedding};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use uuid::Uuid;
use worker::store::embeddings::Settled;
use worker::store::passages::Scope;
use worker::store::{self, embeddings, passages};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        full_text_ranks_only_the_spaces_own_passages_the_same_alone_and_together,
        passages_by_id_and_stored_vectors_stay_in_their_space,
        the_embedding_backlog_leases_fences_and_settles_documents,
        file_extraction_is_leased_fairly_across_tenants,
    ]
}

/// Adds an uploaded PDF's rows to `space`, due for extraction at `now`.
async fn uploaded(db: &TestDb, space: &entity::knowledge_space::Model, now: i64) -> anyhow::Result<Uuid> {
    let new = store::documents::NewDocument {
        tenant_id: space.tenant_id.clone(),
        knowledge_space_id: space.id,
        title: "upload".into(),
        content: String::new(),
        media_type: MediaType::TextPlain,
        source_uri: None,
        metadata: serde_json::json!({}),
        created_by: "author".into(),
        indexing_status: IndexingStatus::Ready,
    };
    let file =
        store::files::NewFile { file_name: "f.pdf".into(), media_type: entity::FileMediaType::Pdf, byte_size: 1 };
    let (document, _) = store::files::add_upload(&db.db, new, file, now).await?;
    Ok(document.id)
}

async fn file_extraction_is_leased_fairly_across_tenants(db: TestDb) -> anyhow::Result<()> {
    let busy = fixtures::space(&db).await?;
    let quiet = fixtures::space(&db).await?;
    let start = entity::now_millis() - 60_000;
    let mut busy_files = Vec::new();
    for offset in 0..5 {
        busy_files.push(uploaded(&db, &busy, start + offset).await?);
    }
    // The quiet tenant's one file came after all of them.
    let quiet_file = uploaded(&db, &quiet, start + 100).await?;
    let now = entity::now_millis();
    let lease = |at| store::files::lease_due(&db.db, 60_000, at);
    // Neither runs anything: the oldest file goes first.
    let first = lease(now).await?.context("a file is due")?;
    ensure_eq!(first.document_id, busy_files[0]);
    // The busy tenant has one running now; the quiet tenant's file goes next, ahead of
    // four older files.
    let second = lease(now).await?.context("a file is due")?;
    ensure_eq!(second.document_id, quiet_file);
    // Both run one: the busy tenant's oldest waiting file.
    let third = lease(now).await?.context("a file is due")?;
    ensure_eq!(third.document_id, busy_files[1]);
    Ok(())
}

async fn full_text_ranks_only_the_spaces_own_passages_the_same_alone_and_together(db: TestDb) -> anyhow::Result<()> {
    let space = fixtures::space(&db).await?;
    let author = fixtures::member(&db, &space, "author", entity::MemberRole::Owner).await?;
    let leases = fixtures::document(&db, &author, "Leases", "A lease fences out a stale worker.").await?;
    fixtures::document(&db, &author, "Bees", "Bees make honey in hives.").await?;
    // Another space with the same words is never a candidate.
    let elsewhere = fixtures::space(&db).await?;
    let stranger = fixtures::member(&db, &elsewhere, "author", entity::MemberRole::Owner).await?;
    fixtures::document(&db, &stranger, "Leases too", "A lease fences out a stale worker.").await?;
    let scope = Scope::space(&space.tenant_id, space.id);
    let terms = vec!["lease".to_owned(), "worker".to_owned()];
    let found = passages::full_text(&db.db, scope, &terms, 10).await?;
    ensure_eq!(found.iter().map(|row| row.document_id).collect::<Vec<_>>(), vec![leases.id]);
    anyhow::ensure!(found[0].score > 0.0, "a match scores above zero: {}", found[0].score);
    ensure_eq!(passages::full_text(&db.db, scope, &[], 10).await?.len(), 0);
    let queries = vec![terms.clone(), Vec::new(), vec!["honey".to_owned()]];
    let together = passages::full_text_for_queries(&db.db, scope, &queries, 10).await?;
    ensure_eq!(together.len(), 3);
    for (terms, list) in queries.iter().zip(&together) {
        let alone = passages::full_text(&db.db, scope, terms, 10).await?;
        let ids = |rows: &[passages::PassageRow]| rows.iter().map(|row| row.id).collect::<Vec<_>>();
        ensure_eq!(ids(list), ids(&alone), "{terms:?}");
    }
    Ok(())
}

async fn passages_by_id_and_stored_vectors_stay_in_their_space(db: TestDb) -> anyhow::Result<()> {
    let space = fixtures::space(&db).await?;
    let author = fixtures::member(&db, &space, "author", entity::MemberRole::Owner).await?;
    let document = fixtures::document_as(&db, &author, "Notes", "First.\n\nSecond.", MediaType::TextPlain).await?;
    let rows = store::documents::passages(&db.db, document.id, -1, 10).await?;
    anyhow::ensure!(!rows.is_empty(), "the document has passages");
    let scope = Scope::space(&space.tenant_id, space.id);
    let ids: Vec<Uuid> = rows.iter().map(|row| row.id).collect();
    let found = passages::by_ids(&db.db, scope, &ids).await?;
    ensure_eq!(found.len(), ids.len());
    anyhow::ensure!(found.iter().all(|row| row.title == "Notes" && row.score == 0.0), "{found:?}");
    let other = fixtures::space(&db).await?;
    let elsewhere = Scope::space(&other.tenant_id, other.id);
    ensure_eq!(passages::by_ids(&db.db, elsewhere, &ids).await?.len(), 0);
    // A vector written for the first passage is read back for its model and size only.
    let lease = lease_document(&db, document.id).await?;
    let row = embedding::Model {
        passage_id: ids[0],
        tenant_id: space.tenant_id.clone(),
        knowledge_space_id: space.id,
        model: "m".into(),
        dimensions: 2,
        vector: [1.0_f32, 0.0].iter().flat_map(|value| value.to_le_bytes()).collect(),
        created_at: entity::now_millis(),
    };
    anyhow::ensure!(embeddings::write_vectors(&db.db, &lease, vec![row], entity::now_millis() + 60_000).await?);
    ensure_eq!(passages::vectors(&db.db, scope, "m", 2, 10).await?.len(), 1);
    ensure_eq!(passages::vectors(&db.db, scope, "m", 3, 10).await?.len(), 0);
    ensure_eq!(passages::vectors(&db.db, scope, "other", 2, 10).await?.len(), 0);
    ensure_eq!(passages::vectors(&db.db, elsewhere, "m", 2, 10).await?.len(), 0);
    Ok(())
}

/// The document, pending, leased by "backlog".
async fn lease_document(db: &TestDb, id: Uuid) -> anyhow::Result<embeddings::DocumentLease> {
    let now = entity::now_millis();
    store::documents::set_indexing(&db.db, id, IndexingStatus::Pending, None, now).await?;
    for _ in 0..100 {
        match embeddings::lease_due(&db.db, "backlog", 60_000, now).await? {
            Some(lease) if lease.id == id => return Ok(lease),
            // Another test's document: leave it leased, it is not ours to work.
            Some(_) => continue,
            None => break,
        }
    }
    anyhow::bail!("document {id} was never due")
}

async fn the_embedding_backlog_leases_fences_and_settles_documents(db: TestDb) -> anyhow::Result<()> {
    let space = fixtures::space(&db).await?;
    let author = fixtures::member(&db, &space, "author", entity::MemberRole::Owner).await?;
    let document = fixtures::document(&db, &author, "Backlog", "One passage to embed.").await?;
    let lease = lease_document(&db, document.id).await?;
    let waiting = embeddings::unembedded(&db.db, document.id, "m", 10).await?;
    anyhow::ensure!(!waiting.is_empty(), "the passages wait for their vectors");
    // A lease no longer held writes nothing.
    let stale = embeddings::DocumentLease { token: Uuid::new_v4(), ..lease };
    let rows = || {
        waiting
            .iter()
            .map(|passage| embedding::Model {
                passage_id: passage.id,
                tenant_id: passage.tenant_id.clone(),
                knowledge_space_id: passage.knowledge_space_id,
                model: "m".into(),
                dimensions: 1,
                vector: 1.0_f32.to_le_bytes().to_vec(),
                created_at: entity::now_millis(),
            })
            .collect::<Vec<_>>()
    };
    anyhow::ensure!(!embeddings::write_vectors(&db.db, &stale, rows(), entity::now_millis()).await?);
    ensure_eq!(embeddings::unembedded(&db.db, document.id, "m", 10).await?.len(), waiting.len());
    anyhow::ensure!(embeddings::write_vectors(&db.db, &lease, rows(), entity::now_millis() + 60_000).await?);
    ensure_eq!(embeddings::unembedded(&db.db, document.id, "m", 10).await?.len(), 0);
    let ready = Settled { status: IndexingStatus::Ready, error: None, available_at: None, attempts: 0 };
    anyhow::ensure!(!embeddings::settle(&db.db, &stale, ready.clone()).await?);
    anyhow::ensure!(embeddings::settle(&db.db, &lease, ready).await?);
    // A new model: ready documents without its vectors wait again; no model: all ready.
    anyhow::ensure!(embeddings::requeue_for_model(&db.db, "another", entity::now_millis()).await? >= 1);
    let row = store::documents::find_any(&db.db, document.id).await?.ok_or_else(|| anyhow::anyhow!("gone"))?;
    ensure_eq!(row.indexing_status, IndexingStatus::Pending);
    anyhow::ensure!(embeddings::mark_all_ready(&db.db).await? >= 1);
    let row = store::documents::find_any(&db.db, document.id).await?.ok_or_else(|| anyhow::anyhow!("gone"))?;
    ensure_eq!(row.indexing_status, IndexingStatus::Ready);
    Ok(())
}
