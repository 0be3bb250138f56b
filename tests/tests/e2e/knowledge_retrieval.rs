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
    db_tests![passage_full_text_beats_whole_document_search_on_the_evaluation]
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
