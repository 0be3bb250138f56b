//! Memory of uploads: the release `api` binary (embedded worker on, a temporary SQLite
//! file) takes the largest PDF and Word file the tests make (`kfs_tests::synthetic`: a
//! 40 MiB PDF of 600 pages, a Word file of 100,000 paragraphs with a 30 MiB picture), one
//! at a time, then eight 40 MiB PDFs at once. For each it prints the server's resident
//! memory before, its peak while the upload is received, stored, extracted and split, the
//! difference, and the peak of the `pdftotext` child processes (which read PDFs outside
//! the server, each under `KFS_EXTRACT_MEMORY_BYTES`).
//!
//! `cargo bench -p workspace-tests --bench uploads` (needs `pdftotext`: poppler-utils).
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kfs_tests::process::{ApiProcess, api_command, build, wait_until};
use kfs_tests::server::TestServer;
use serde_json::{Value, json};

fn main() -> ExitCode {
    kfs_tests::bench::main("uploads", || {
        tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run())
    })
}

async fn run() -> anyhow::Result<()> {
    let ([api], profile) = build(["api"])?;
    let directory = std::env::temp_dir().join(format!("kfs-uploads-bench-{}", std::process::id()));
    std::fs::create_dir_all(&directory)?;
    let database = format!("sqlite://{}?mode=rwc", directory.join("bench.sqlite").display());
    let mut command = api_command(&api, &database);
    command.env("KFS_EMBEDDED_WORKER", "true");
    let server = ApiProcess::start(command).await?;
    let token = TestServer::token("bench", "bench-tenant");
    let http = reqwest::Client::new();
    let space = graphql(&http, &server, &token, "mutation { createKnowledgeSpace(input: { name: \"bench\" }) { id } }")
        .await?
        .pointer("/createKnowledgeSpace/id")
        .and_then(Value::as_str)
        .context("no space")?
        .to_owned();
    println!("uploads: api binary built with {profile}, SQLite, embedded worker, KFS_EXTRACT_CONCURRENCY 2");
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>14} {:>8} {:>10}",
        "case", "before MiB", "peak MiB", "added MiB", "pdftotext MiB", "seconds", "after MiB"
    );
    let pdf = kfs_tests::synthetic::pdf(600, 40, 40 << 20);
    let docx = kfs_tests::synthetic::docx(100_000, 30 << 20)?;
    let pdf_mib = pdf.len() as f64 / 1048576.0;
    let docx_mib = docx.len() as f64 / 1048576.0;
    measure(&http, &server, &token, &space, &format!("one PDF, {pdf_mib:.1} MiB"), vec![("large.pdf", pdf.clone())])
        .await?;
    measure(&http, &server, &token, &space, &format!("one Word file, {docx_mib:.1} MiB"), vec![("large.docx", docx)])
        .await?;
    let eight: Vec<(&str, Vec<u8>)> = (0..8).map(|_| ("large.pdf", pdf.clone())).collect();
    measure(&http, &server, &token, &space, &format!("eight PDFs at once, {pdf_mib:.1} MiB each"), eight).await?;
    // Word files built to hurt, each refused (FAILED) while it is read.
    let paragraph = hostile_word(b"<w:p><w:r><w:t>", b"tide ", 40 << 20, b"</w:t></w:r></w:p>")?;
    let case = format!("Word: a 200 MiB paragraph, {} KiB", paragraph.len() / 1024);
    measure(&http, &server, &token, &space, &case, vec![("paragraph.docx", paragraph)]).await?;
    let nested = hostile_word(b"", b"<a>", 36_000_000, b"")?;
    let case = format!("Word: 36 M nested elements, {} KiB", nested.len() / 1024);
    measure(&http, &server, &token, &space, &case, vec![("nested.docx", nested)]).await?;
    let attributes = hostile_word(b"<w:p><w:pPr><w:pStyle", b" a=\"1\"", 600_000, b"/></w:pPr></w:p>")?;
    let case = format!("Word: 600,000 attributes, {} KiB", attributes.len() / 1024);
    measure(&http, &server, &token, &space, &case, vec![("attributes.docx", attributes)]).await?;
    drop(server);
    let _ = std::fs::remove_dir_all(&directory);
    Ok(())
}

/// A Word file whose body is `head`, `repeated` `times`, then `tail`, written to the archive
/// a piece at a time (the body may be hundreds of megabytes; its archive is small).
fn hostile_word(head: &[u8], repeated: &[u8], times: usize, tail: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    archive.start_file("[Content_Types].xml", options)?;
    archive.write_all(b"<?xml version=\"1.0\"?><Types/>")?;
    archive.start_file("word/document.xml", options.large_file(true))?;
    archive.write_all(b"<?xml version=\"1.0\"?><w:document xmlns:w=\"w\"><w:body>")?;
    archive.write_all(head)?;
    let block = repeated.repeat(64 * 1024);
    for _ in 0..times / (64 * 1024) {
        archive.write_all(&block)?;
    }
    archive.write_all(&repeated.repeat(times % (64 * 1024)))?;
    archive.write_all(tail)?;
    archive.write_all(b"</w:body></w:document>")?;
    Ok(archive.finish()?.into_inner())
}

/// Uploads `files` at once, waits until every one is extracted (or failed, for the files
/// built to fail), and prints the memory before, at peak and two seconds after.
async fn measure(
    http: &reqwest::Client,
    server: &ApiProcess,
    token: &str,
    space: &str,
    case: &str,
    files: Vec<(&str, Vec<u8>)>,
) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = server.process.id();
    let before = rss_kib(pid)?;
    let (peak, child_peak, sampling) =
        (Arc::new(AtomicU64::new(before)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(true)));
    let sampler = {
        let (peak, child_peak, sampling) = (peak.clone(), child_peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                if let Ok(now) = rss_kib(pid) {
                    peak.fetch_max(now, Ordering::Relaxed);
                }
                child_peak.fetch_max(children_rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let started = Instant::now();
    let url = server.graphql_url();
    let uploads =
        files.into_iter().map(|(name, bytes)| kfs_tests::server::upload_file(http, &url, token, space, name, bytes));
    let ids = futures_util::future::try_join_all(uploads).await?;
    for id in &ids {
        let query = format!("{{ knowledgeDocument(id: \"{id}\") {{ indexingStatus indexingError }} }}");
        let mut last = Value::Null;
        wait_until(Duration::from_secs(600), "the upload to be extracted", async || {
            last = graphql(http, server, token, &query).await?;
            Ok(!matches!(
                last.pointer("/knowledgeDocument/indexingStatus").and_then(Value::as_str),
                Some("EXTRACTING" | "SPLITTING")
            ))
        })
        .await?;
        let hostile = case.starts_with("Word:");
        let expected = if hostile { "FAILED" } else { "READY" };
        ensure!(last.pointer("/knowledgeDocument/indexingStatus") == Some(&json!(expected)), "{last}");
    }
    let seconds = started.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Relaxed);
    sampler.await?;
    let (peak, child_peak) = (peak.load(Ordering::Relaxed), child_peak.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(pid)?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "{case:<34} {:>10.0} {:>10.0} {:>10.0} {:>14.0} {seconds:>8.1} {:>10.0}",
        mib(before),
        mib(peak),
        mib(peak.saturating_sub(before)),
        mib(child_peak),
        mib(after)
    );
    Ok(())
}

async fn graphql(http: &reqwest::Client, server: &ApiProcess, token: &str, query: &str) -> anyhow::Result<Value> {
    let body: Value = http
        .post(server.graphql_url())
        .bearer_auth(token)
        .json(&json!({ "query": query }))
        .send()
        .await?
        .json()
        .await?;
    ensure!(body.get("errors").is_none(), "{body}");
    body.get("data").cloned().context("no data")
}

/// `VmRSS` of process `pid`, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// The resident memory of `pid`'s children together (the `pdftotext` processes), in KiB.
fn children_rss_kib(pid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).ok().and_then(|stat| {
                stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
            }) == Some(pid)
        })
        .filter_map(|child| rss_kib(child).ok())
        .sum()
}
