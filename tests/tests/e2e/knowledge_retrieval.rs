//! The retrieval evaluation (`kfs_tests::retrieval_eval`) as a test: passages found by full
//! text must answer more questions, and rank the answer higher, than whole documents did.
//! Both spaces hold the same corpus, so a hit from the other space fails the run. The
//! bench (`cargo bench -p workspace-tests --bench retrieval`) prints hybrid too.
use anyhow::ensure;
use kfs_tests::retrieval_eval::{self, corpus};
use kfs_tests::{DbTest, TestDb, db_tests};
use worker::knowledge::index::Indexing;
use worker::knowledge::retrieve::Retriever;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        passage_full_text_beats_whole_document_search_on_the_evaluation,
        searching_a_plans_queries_together_finds_what_each_finds_alone,
    ]
}

async fn passage_full_text_beats_whole_document_search_on_the_evaluation(db: TestDb) -> anyhow::Result<()> {
    let corpus = corpus()?;
    let whole = retrieval_eval::load_whole(&db, &corpus).await?;
    let split =
        retrieval_eval::load(&db, &corpus, Indexing { chunk: Default::default(), embeddings_on: false }).await?;
    let before = retrieval_eval::whole_documents(&db, &corpus, &whole).await?;
    let now = retrieval_eval::passages(&db, &corpus, &split, &Retriever::full_text()).await?;
    println!("retrieval evaluation on {:?}: whole documents {before}; passages by full text {now}", db.backend);
    ensure!(now.recall_at_5 > before.recall_at_5, "recall@5: passages {now}, whole documents {before}");
    ensure!(now.mrr > before.mrr, "MRR: passages {now}, whole documents {before}");
    Ok(())
}

/// A research plan's sub-queries are searched together (one statement on PostgreSQL):
/// each answer is exactly what searching that query alone finds, in the order asked,
/// including a query with no searchable words and one that matches nothing.
async fn searching_a_plans_queries_together_finds_what_each_finds_alone(db: TestDb) -> anyhow::Result<()> {
    use worker::knowledge::search::Scope;
    let (space, _owner, _documents) = crate::worker_support::space_with_documents(&db).await?;
    let scope = Scope::space(&space.tenant_id, space.id);
    let queries: Vec<String> = [
        "How does a lease token fence a stale worker?",
        "the of and",
        "retried with exponential backoff and jitter",
        "volcanic zeppelins",
        "lease",
    ]
    .map(str::to_owned)
    .to_vec();
    let retriever = Retriever::full_text();
    let together = retriever.search_many(&db.db, scope, &queries, 2).await?;
    ensure!(together.len() == queries.len(), "{} answers for {} queries", together.len(), queries.len());
    for (query, found) in queries.iter().zip(&together) {
        let alone = retriever.search(&db.db, scope, query, 2).await?;
        ensure!(*found == alone, "{query:?}: together {found:?}, alone {alone:?}");
    }
    ensure!(!together[0].is_empty() && together[1].is_empty() && together[3].is_empty(), "{together:?}");
    Ok(())
}
