//! Filtered search at scale: a space of 10,000 documents of ten passages each (100,000
//! passages), each document with `team` (one of ten) and `year` metadata. Prints, per
//! backend, the mean time of a full-text search of the space, of the same search under a
//! metadata filter (a tenth of the documents: resolving the filter, once per round in a
//! task, plus the search), and of resolving the filter alone, over 50 queries each.
//! PostgreSQL's tables are analyzed after loading, as autovacuum would.
//!
//! `cargo bench -p workspace-tests --bench filters`; the PostgreSQL rows need
//! `KFS_TEST_POSTGRES_URL` (an admin URL, as for the tests).
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use entity::{IndexingStatus, MediaType};
use kfs_tests::{Backend, TestConfig, TestDb, fixtures};
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::json;
use worker::knowledge::chunk::Chunk;
use worker::knowledge::retrieve::Retriever;
use worker::store::passages::Scope;

const DOCUMENTS: usize = 10_000;
const PASSAGES_PER_DOCUMENT: usize = 10;
const QUERIES: usize = 50;

fn main() -> ExitCode {
    kfs_tests::bench::main("filters", run)
}

fn run() -> anyhow::Result<()> {
    let config = TestConfig::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("building the runtime")?;
    println!(
        "{DOCUMENTS} documents x {PASSAGES_PER_DOCUMENT} passages; filter: metadata team = one of ten (a tenth of the documents)"
    );
    println!(
        "{:<10} {:>14} {:>14} {:>16} {:>10}",
        "backend", "unfiltered ms", "filtered ms", "resolve only ms", "load s"
    );
    for backend in [Backend::Sqlite, Backend::Postgres] {
        if backend == Backend::Postgres && config.postgres_url.is_none() {
            println!("{:<10} skipped: KFS_TEST_POSTGRES_URL is not set", backend.name());
            continue;
        }
        runtime.block_on(TestDb::run(backend, &config, |db| async move {
            let started = Instant::now();
            let space = fixtures::space(&db).await?;
            load(&db, &space).await?;
            if backend == Backend::Postgres {
                // What autovacuum does on a production server (this machine runs without it).
                use sea_orm::ConnectionTrait as _;
                db.db.execute_unprepared("ANALYZE").await?;
            }
            let loaded = started.elapsed();
            let (unfiltered, filtered, resolve) = measure(&db, &space).await?;
            let ms = |time: Duration| time.as_secs_f64() * 1000.0 / QUERIES as f64;
            println!(
                "{:<10} {:>14.2} {:>14.2} {:>16.2} {:>10.1}",
                backend.name(),
                ms(unfiltered),
                ms(filtered),
                ms(resolve),
                loaded.as_secs_f64()
            );
            let (documents, resolve, search) = largest_filter(&db).await?;
            println!(
                "{:<10} the largest filter the limits allow ({LARGE_KEYS} keys x {LARGE_VALUES} values) over {documents} documents with 16 KiB metadata: resolving {:.1} ms, then a search {:.1} ms",
                backend.name(),
                resolve.as_secs_f64() * 1000.0,
                search.as_secs_f64() * 1000.0
            );
            Ok(())
        }))?;
    }
    Ok(())
}

/// A word of the bench's vocabulary.
fn word(index: usize) -> String {
    format!("w{index:04}")
}

async fn load(db: &TestDb, space: &entity::knowledge_space::Model) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(7);
    let now = entity::now_millis();
    for batch in 0..DOCUMENTS / 200 {
        let txn = worker::store::begin_write(&db.db).await?;
        for index in batch * 200..(batch + 1) * 200 {
            let mut content = String::new();
            let mut chunks = Vec::with_capacity(PASSAGES_PER_DOCUMENT);
            for ordinal in 0..PASSAGES_PER_DOCUMENT {
                let text: Vec<String> = (0..40).map(|_| word(rng.random_range(0..3000))).collect();
                let text = text.join(" ");
                let start = content.chars().count();
                content.push_str(&text);
                chunks.push(Chunk {
                    ordinal: i32::try_from(ordinal)?,
                    char_start: start,
                    char_end: start + text.chars().count(),
                    heading_path: Vec::new(),
                    tokens: 60,
                    text,
                    pages: None,
                    source_map: entity::SourceMap::default(),
                });
                content.push_str("\n\n");
            }
            let new = worker::store::documents::NewDocument {
                tenant_id: space.tenant_id.clone(),
                knowledge_space_id: space.id,
                title: format!("Document {index}"),
                content,
                media_type: MediaType::TextPlain,
                source_uri: None,
                metadata: json!({ "team": format!("team-{}", index % 10), "year": 2015 + index % 10 }),
                created_by: "bench".to_owned(),
                indexing_status: IndexingStatus::Ready,
            };
            worker::store::documents::add(&txn, new, &chunks, now).await?;
        }
        txn.commit().await?;
    }
    Ok(())
}

/// The total time of `QUERIES` searches unfiltered, filtered (resolving the filter
/// included) and of resolving the filter alone.
async fn measure(
    db: &TestDb,
    space: &entity::knowledge_space::Model,
) -> anyhow::Result<(Duration, Duration, Duration)> {
    let mut rng = StdRng::seed_from_u64(11);
    let queries: Vec<String> =
        (0..QUERIES).map(|_| (0..3).map(|_| word(rng.random_range(0..3000))).collect::<Vec<_>>().join(" ")).collect();
    let retriever = Retriever::full_text();
    let scope = Scope::space(&space.tenant_id, space.id);
    let (mut unfiltered, mut filtered, mut resolve) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut found = (0, 0);
    for (index, query) in queries.iter().enumerate() {
        let started = Instant::now();
        found.0 += retriever.search(&db.db, scope, query, 20).await?.len();
        unfiltered += started.elapsed();

        let filters: entity::DocumentFilters = entity::TaskLimits::parse(
            &json!({ "filters": { "metadata": { "team": format!("team-{}", index % 10) } } }),
        )?
        .filters
        .context("filters")?;
        let started = Instant::now();
        let allowed = worker::store::filtered::matching(&db.db, &space.tenant_id, space.id, &filters).await?;
        resolve += started.elapsed();
        let scope = Scope { documents: Some(&allowed), ..scope };
        found.1 += retriever.search(&db.db, scope, query, 20).await?.len();
        filtered += started.elapsed();
    }
    anyhow::ensure!(found.0 > 0 && found.1 > 0, "the searches found nothing: {found:?}");
    Ok((unfiltered, filtered, resolve))
}

/// Keys of the largest filter: as many as a filter may name.
const LARGE_KEYS: usize = 32;
/// Values per key of the largest filter: as many as fit with the keys in the 16 KiB a
/// task's limits may take.
const LARGE_VALUES: usize = 52;

/// A space of `LARGE_DOCUMENTS` documents whose metadata is near its 16 KiB limit (every
/// key of the filter, each a list of values, half of them wanted), and the time to resolve
/// the largest filter over it and to search under it.
async fn largest_filter(db: &TestDb) -> anyhow::Result<(usize, Duration, Duration)> {
    const LARGE_DOCUMENTS: usize = 400;
    let space = fixtures::space(db).await?;
    let now = entity::now_millis();
    let txn = worker::store::begin_write(&db.db).await?;
    for index in 0..LARGE_DOCUMENTS {
        let metadata: serde_json::Map<String, serde_json::Value> = (0..LARGE_KEYS)
            .map(|key| {
                let values: Vec<String> = (0..40).map(|value| format!("d{}-{value:03}", index % 7)).collect();
                (format!("key{key:02}"), json!(values))
            })
            .collect();
        let text = (0..40).map(|n| word((index * 40 + n) % 3000)).collect::<Vec<_>>().join(" ");
        let chunk = Chunk {
            ordinal: 0,
            char_start: 0,
            char_end: text.chars().count(),
            heading_path: Vec::new(),
            tokens: 60,
            text: text.clone(),
            pages: None,
            source_map: entity::SourceMap::default(),
        };
        let new = worker::store::documents::NewDocument {
            tenant_id: space.tenant_id.clone(),
            knowledge_space_id: space.id,
            title: format!("Large {index}"),
            content: text,
            media_type: MediaType::TextPlain,
            source_uri: None,
            metadata: serde_json::Value::Object(metadata),
            created_by: "bench".to_owned(),
            indexing_status: IndexingStatus::Ready,
        };
        worker::store::documents::add(&txn, new, &[chunk], now).await?;
    }
    txn.commit().await?;
    let wanted: serde_json::Map<String, serde_json::Value> = (0..LARGE_KEYS)
        .map(|key| {
            let values: Vec<String> = (0..LARGE_VALUES).map(|value| format!("d{}-{value:03}", value % 3)).collect();
            (format!("key{key:02}"), json!(values))
        })
        .collect();
    let filters = json!({ "filters": { "metadata": wanted } });
    anyhow::ensure!(filters.to_string().len() <= 16 * 1024, "the filter is {} bytes", filters.to_string().len());
    let filters = entity::TaskLimits::parse(&filters)?.filters.context("filters")?;
    let started = Instant::now();
    let allowed = worker::store::filtered::matching(&db.db, &space.tenant_id, space.id, &filters).await?;
    let resolve = started.elapsed();
    anyhow::ensure!(!allowed.is_empty(), "the largest filter matched nothing");
    let scope = Scope { documents: Some(&allowed), ..Scope::space(&space.tenant_id, space.id) };
    let started = Instant::now();
    Retriever::full_text().search(&db.db, scope, &word(5), 20).await?;
    Ok((LARGE_DOCUMENTS, resolve, started.elapsed()))
}
