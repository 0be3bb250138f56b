//! PDF and Word uploads through the API (GraphQL multipart requests, as upload clients
//! send them): files made by real office software from the tests' own text
//! (`tests/fixtures/uploads/make.sh`) are extracted in the background into passages that
//! know their pages and headings, and research cites the page; files that cannot be read
//! fail with a reason, never a 5xx or a stuck status; the preflight header, the size
//! limit and the quota hold; a removed, replaced or deleted document's bytes are gone.
use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kfs_tests::process::wait_until;
use kfs_tests::server::TestServer;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::{Api, string_at};

pub fn tests() -> Vec<DbTest> {
    let reading_pdfs = db_tests![
        pdf_and_word_files_become_passages_with_pages_and_headings_and_research_cites_the_page,
        a_subscription_follows_an_upload_until_it_is_ready_and_strangers_see_nothing,
        a_forty_mebibyte_pdf_is_extracted_page_by_page,
        a_hundred_uploads_at_once_are_extracted_a_bounded_number_at_a_time,
        files_that_cannot_be_read_fail_with_a_reason,
        text_past_the_extracted_bytes_limit_fails_the_document,
        a_removed_replaced_or_deleted_documents_bytes_are_gone,
    ];
    let mut tests: Vec<DbTest> = reading_pdfs.into_iter().map(DbTest::needing_pdftotext).collect();
    tests.extend(db_tests![uploads_need_the_preflight_header_and_are_held_to_the_size_limit_and_the_quota]);
    tests
}

const UPLOAD: &str = "mutation($space: UUID!, $file: Upload!, $title: String) { \
    uploadKnowledgeDocument(input: { knowledgeSpaceId: $space, file: $file, title: $title }) { \
    id title revision mediaType indexingStatus file { fileName byteSize } } }";
const REPLACE: &str = "mutation($id: UUID!, $file: Upload!, $rev: Int) { \
    replaceKnowledgeDocumentFile(id: $id, file: $file, expectedRevision: $rev) { id revision indexingStatus } }";
const DOCUMENT: &str = "query($space: UUID!) { knowledgeSpace(id: $space) { documents(first: 10) { \
    id title content mediaType indexingStatus indexingError file { fileName byteSize pageCount } \
    passages(first: 30) { ordinal charStart charEnd pageStart pageEnd headingPath text } } } }";

/// The committed fixture `name`.
fn fixture(name: &str) -> anyhow::Result<Vec<u8>> {
    let path = format!("{}/fixtures/uploads/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).with_context(|| format!("reading {path}"))
}

/// Sends a GraphQL multipart request (operations, map, one file part) as `bearer`, with
/// the preflight header unless `preflight` is false; returns the status and the body.
async fn multipart(
    server: &TestServer,
    bearer: &str,
    query: &str,
    variables: Value,
    file: (&str, Vec<u8>),
    preflight: bool,
) -> anyhow::Result<(u16, Value)> {
    let operations = json!({ "query": query, "variables": variables });
    let form = reqwest::multipart::Form::new()
        .text("operations", operations.to_string())
        .text("map", json!({ "0": ["variables.file"] }).to_string())
        .part("0", reqwest::multipart::Part::bytes(file.1).file_name(file.0.to_owned()));
    let mut request = server.http.post(server.graphql_url()).bearer_auth(bearer).multipart(form);
    if preflight {
        request = request.header("GraphQL-Preflight", "1");
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// Uploads `file` into `space` as `bearer`; returns the document the mutation answered.
async fn upload(api: &Api, bearer: &str, space: &str, name: &str, bytes: Vec<u8>) -> anyhow::Result<Value> {
    let variables = json!({ "space": space, "file": null });
    let (status, body) = multipart(&api.server, bearer, UPLOAD, variables, (name, bytes), true).await?;
    ensure!(status == 200 && body.get("errors").is_none(), "upload of {name} answered {status}: {body}");
    body.pointer("/data/uploadKnowledgeDocument").cloned().context("no document")
}

/// The space's documents, as `bearer` reads them.
async fn documents(api: &Api, bearer: &str, space: &str) -> anyhow::Result<Vec<Value>> {
    let data = api.data(Some(bearer), DOCUMENT, json!({ "space": space })).await?;
    Ok(data.pointer("/knowledgeSpace/documents").and_then(Value::as_array).cloned().unwrap_or_default())
}

/// Waits until no document of the space is extracting or splitting; returns them.
async fn settled(api: &Api, bearer: &str, space: &str) -> anyhow::Result<Vec<Value>> {
    let mut last = Vec::new();
    wait_until(Duration::from_secs(60), "uploads to settle", async || {
        last = documents(api, bearer, space).await?;
        Ok(last.iter().all(|document| !matches!(document["indexingStatus"].as_str(), Some("EXTRACTING" | "SPLITTING"))))
    })
    .await?;
    Ok(last)
}

fn by_title<'a>(documents: &'a [Value], title: &str) -> anyhow::Result<&'a Value> {
    documents.iter().find(|document| document["title"] == title).with_context(|| format!("no document {title}"))
}

/// A server with the embedded worker on (it extracts), `tweak`ed.
async fn api_with_worker(db: &TestDb, tweak: impl FnOnce(&mut api::config::Settings)) -> anyhow::Result<Api> {
    let server = TestServer::start_with(&db.url, |settings| {
        settings.embedded_worker = true;
        tweak(settings);
    })
    .await?;
    Ok(Api { server, tenant: format!("tenant-{}", Uuid::new_v4().simple()) })
}

/// The words of a text, lower case, in order.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect()
}

/// How much of `expected` appears in `found` in the same order (longest common
/// subsequence over the words, as a share of `expected`).
fn in_order_share(expected: &[String], found: &[String]) -> f64 {
    let mut row = vec![0usize; found.len() + 1];
    for word in expected {
        let mut diagonal = 0;
        for (index, other) in found.iter().enumerate() {
            let above = row[index + 1];
            row[index + 1] = if word == other { diagonal + 1 } else { above.max(row[index]) };
            diagonal = above;
        }
    }
    row[found.len()] as f64 / expected.len().max(1) as f64
}

async fn pdf_and_word_files_become_passages_with_pages_and_headings_and_research_cites_the_page(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = api_with_worker(&db, |_| {}).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let source = String::from_utf8(fixture("tides.md")?)?;
    let pdf = upload(&api, &token, &space, "tides.pdf", fixture("tides.pdf")?).await?;
    ensure!(pdf["indexingStatus"] == "EXTRACTING" && pdf["mediaType"] == "APPLICATION_PDF", "{pdf}");
    ensure!(pdf["title"] == "tides.pdf" && pdf["file"]["fileName"] == "tides.pdf", "{pdf}");
    let docx = upload(&api, &token, &space, "tides.docx", fixture("tides.docx")?).await?;
    ensure!(docx["mediaType"] == "APPLICATION_DOCX", "{docx}");
    let documents = settled(&api, &token, &space).await?;

    // The PDF: its text in order, two pages, every passage on the page its text is on.
    let pdf = by_title(&documents, "tides.pdf")?;
    ensure!(pdf["indexingStatus"] == "READY" && pdf["file"]["pageCount"] == 2, "{pdf}");
    let share = in_order_share(&words(&source), &words(pdf["content"].as_str().unwrap_or_default()));
    ensure!(share >= 0.95, "the PDF's text holds {share:.3} of the source's words in order");
    let passages = pdf["passages"].as_array().context("passages")?;
    ensure!(!passages.is_empty(), "{pdf}");
    let content: Vec<char> = pdf["content"].as_str().unwrap_or_default().chars().collect();
    for passage in passages {
        let text = passage["text"].as_str().unwrap_or_default();
        let expected_page = if text.contains("Mean sea level") { 2 } else { 1 };
        ensure!(passage["pageStart"] == expected_page && passage["pageEnd"] == expected_page, "{passage}");
        let (start, end) =
            (passage["charStart"].as_u64().unwrap_or(0) as usize, passage["charEnd"].as_u64().unwrap_or(0) as usize);
        let shown: String = content[start..end].iter().collect();
        ensure_eq!(words(&shown), words(text));
    }
    ensure!(passages.iter().any(|passage| passage["pageStart"] == 2), "no passage on page 2: {passages:?}");

    // The Word file: its text in order, headings as heading paths, the table as text.
    let docx = by_title(&documents, "tides.docx")?;
    ensure!(docx["indexingStatus"] == "READY" && docx["file"]["pageCount"].is_null(), "{docx}");
    let share = in_order_share(&words(&source), &words(docx["content"].as_str().unwrap_or_default()));
    ensure!(share >= 0.95, "the Word file's text holds {share:.3} of the source's words in order");
    let passages = docx["passages"].as_array().context("passages")?;
    ensure!(passages.iter().all(|passage| passage["pageStart"].is_null()), "{docx}");
    let headed = |heading: &str| {
        passages.iter().find(|passage| {
            passage["headingPath"].as_array().is_some_and(|path| path.iter().any(|item| item == heading))
        })
    };
    let spring = headed("Spring tides").context("no passage under Spring tides")?;
    ensure_eq!(spring["headingPath"], json!(["Tides and the Moon", "Spring tides"]));
    ensure!(spring["text"].as_str().unwrap_or_default().contains("full moon"), "{spring}");
    ensure!(
        passages.iter().any(|passage| passage["text"].as_str().unwrap_or_default().contains("quarter moon")),
        "the table's text is missing: {passages:?}"
    );

    // A text document with a source, so evidence shows where each item came from.
    let input = json!({ "knowledgeSpaceId": space, "title": "Harbour notes", "mediaType": "TEXT_PLAIN",
        "content": "Tide gauges in the harbour measure mean sea level every hour.", "sourceUri": "https://example.org/harbour" });
    api.data(Some(&token), crate::knowledge_documents::ADD, json!({ "input": input })).await?;

    // Research over the PDF cites the page its evidence is on (the built-in engine).
    let input = json!({ "knowledgeSpaceId": space, "query": "How is mean sea level measured by tide gauges?",
        "mode": "FAST", "topK": 3, "limits": {}, "metadata": {} });
    let created = api
        .data(
            Some(&token),
            "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }",
            json!({ "input": input }),
        )
        .await?;
    let task = string_at(&created, "/createResearchTask/id")?;
    let mut trace = Value::Null;
    wait_until(Duration::from_secs(60), "the task to complete", async || {
        let data = api
            .data(
                Some(&token),
                "query($id: UUID!) { researchTask(id: $id) { stage answerTrace { evidence \
                 citations { n quote { text charStart charEnd pageStart pageEnd } } } } }",
                json!({ "id": task }),
            )
            .await?;
        trace = data["researchTask"].clone();
        Ok(trace["stage"] == "COMPLETED")
    })
    .await?;
    let evidence = trace.pointer("/answerTrace/evidence").and_then(Value::as_array).context("evidence")?;
    let cited = evidence
        .iter()
        .find(|item| {
            item["title"] == "tides.pdf" && item["text"].as_str().unwrap_or_default().contains("Mean sea level")
        })
        .with_context(|| format!("the PDF's passage is not evidence: {evidence:?}"))?;
    ensure!(cited["page_start"] == 2 && cited["page_end"] == 2, "{cited}");
    ensure!(cited.get("source_uri").is_none(), "the PDF has no source: {cited}");
    // The quote of the PDF's passage is on its page, inside the passage's range.
    let citations = trace.pointer("/answerTrace/citations").and_then(Value::as_array).context("citations")?;
    let quoted = citations
        .iter()
        .find(|citation| citation["n"] == cited["citation"])
        .with_context(|| format!("the PDF's passage is not cited: {citations:?}"))?;
    let quote = &quoted["quote"];
    ensure!(quote["pageStart"] == 2 && quote["pageEnd"] == 2, "{quote}");
    let within = quote["charStart"].as_i64() >= cited["char_start"].as_i64()
        && quote["charEnd"].as_i64() <= cited["char_end"].as_i64();
    ensure!(within && quote["text"].as_str().is_some_and(|text| !text.is_empty()), "{quote} in {cited}");
    let harbour =
        evidence.iter().find(|item| item["title"] == "Harbour notes").with_context(|| format!("{evidence:?}"))?;
    ensure!(harbour["source_uri"] == "https://example.org/harbour" && harbour.get("page_start").is_none(), "{harbour}");
    // An agent reading the task over MCP sees the same pages and source.
    let mcp = TestServer::token_with("alice", &api.tenant, Some("mcp"), entity::now_millis() / 1000 + 3600);
    let read = crate::mcp_endpoint::call(&api, &mcp, "get_research", json!({ "task_id": task })).await?;
    let citations = read["result"]["structuredContent"]["citations"].as_array().cloned().unwrap_or_default();
    ensure!(
        citations.iter().any(|citation| citation["page_start"] == 2 && citation["page_end"] == 2),
        "no citation of page 2 over MCP: {read}"
    );
    ensure!(
        citations.iter().any(|citation| citation["source_uri"] == "https://example.org/harbour"),
        "no source over MCP: {read}"
    );
    let word_item = evidence.iter().find(|item| item["title"] == "tides.docx");
    ensure!(word_item.is_none_or(|item| item.get("page_start").is_none()), "{word_item:?}");
    api.stop().await;
    Ok(())
}

/// A PDF with one empty page: valid, but no text layer (as a scan without OCR).
fn pdf_without_text() -> Vec<u8> {
    kfs_tests::synthetic::pdf_of(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>".to_vec(),
    ])
}

/// A ZIP archive shaped like a Word file whose body decompresses to `size` bytes.
fn zip_bomb(size: usize) -> anyhow::Result<Vec<u8>> {
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    archive.start_file("[Content_Types].xml", options)?;
    archive.write_all(b"<?xml version=\"1.0\"?><Types/>")?;
    archive.start_file("word/document.xml", options)?;
    let block = vec![b' '; 1 << 20];
    for _ in 0..size / block.len() {
        archive.write_all(&block)?;
    }
    Ok(archive.finish()?.into_inner())
}

async fn files_that_cannot_be_read_fail_with_a_reason(db: TestDb) -> anyhow::Result<()> {
    let api = api_with_worker(&db, |settings| settings.worker.extract.max_unzipped_bytes = 4 << 20).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let whole = fixture("tides.pdf")?;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated.pdf", whole[..whole.len() / 2].to_vec(), "truncated"),
        ("locked.pdf", fixture("tides-user.pdf")?, "password"),
        ("picture.pdf", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec(), "PNG image"),
        ("scan.pdf", pdf_without_text(), "no text layer"),
        ("bomb.docx", zip_bomb(64 << 20)?, "ZIP bomb"),
        (
            "notword.docx",
            {
                let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
                archive.start_file("hello.txt", zip::write::SimpleFileOptions::default())?;
                archive.write_all(b"hello")?;
                archive.finish()?.into_inner()
            },
            "not a Word document",
        ),
    ];
    for (name, bytes, _) in &cases {
        upload(&api, &token, &space, name, bytes.clone()).await?;
    }
    // Only an owner password (it restricts editing, not reading): extracted.
    upload(&api, &token, &space, "owner-only.pdf", fixture("tides-owner.pdf")?).await?;
    let documents = settled(&api, &token, &space).await?;
    for (name, _, reason) in &cases {
        let document = by_title(&documents, name)?;
        ensure!(document["indexingStatus"] == "FAILED", "{name}: {document}");
        let error = document["indexingError"].as_str().unwrap_or_default();
        ensure!(error.contains(reason), "{name}: the error {error:?} does not say {reason:?}");
        ensure!(document["passages"].as_array().is_some_and(Vec::is_empty), "{name}: {document}");
    }
    let owner_only = by_title(&documents, "owner-only.pdf")?;
    ensure!(owner_only["indexingStatus"] == "READY" && owner_only["file"]["pageCount"] == 2, "{owner_only}");

    // Neither a PDF nor a Word file by its bytes or its name: refused at once.
    let variables = json!({ "space": space, "file": null });
    let (_, body) =
        multipart(&api.server, &token, UPLOAD, variables, ("photo.png", b"\x89PNG\r\n\x1a\n".to_vec()), true).await?;
    ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("BAD_USER_INPUT"));
    // PDF and Word documents are uploads, not strings.
    let input = json!({ "knowledgeSpaceId": space, "title": "x", "content": "x", "mediaType": "APPLICATION_PDF" });
    let code = api.code(Some(&token), crate::knowledge_documents::ADD, json!({ "input": input })).await?;
    ensure_eq!(code, "BAD_USER_INPUT");
    api.stop().await;
    Ok(())
}

async fn text_past_the_extracted_bytes_limit_fails_the_document(db: TestDb) -> anyhow::Result<()> {
    let api = api_with_worker(&db, |settings| settings.worker.max_extracted_bytes = 300).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    upload(&api, &token, &space, "tides.pdf", fixture("tides.pdf")?).await?;
    upload(&api, &token, &space, "tides.docx", fixture("tides.docx")?).await?;
    for document in settled(&api, &token, &space).await? {
        let error = document["indexingError"].as_str().unwrap_or_default();
        ensure!(document["indexingStatus"] == "FAILED" && error.contains("KFS_MAX_EXTRACTED_BYTES"), "{document}");
        ensure!(document["content"] == "" && document["passages"].as_array().is_some_and(Vec::is_empty), "{document}");
    }
    api.stop().await;
    Ok(())
}

async fn uploads_need_the_preflight_header_and_are_held_to_the_size_limit_and_the_quota(
    db: TestDb,
) -> anyhow::Result<()> {
    let limit = 64 * 1024;
    let pdf = fixture("tides.pdf")?;
    let quota = (limit + pdf.len() + pdf.len() / 2) as u64;
    let api = Api {
        server: TestServer::start_with(&db.url, |settings| {
            settings.max_upload_bytes = limit;
            settings.quota_upload_bytes_per_tenant = Some(quota);
        })
        .await?,
        tenant: format!("tenant-{}", Uuid::new_v4().simple()),
    };
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let variables = json!({ "space": space, "file": null });

    // No preflight header: a browser form could have sent it. Nothing is stored.
    let (status, body) =
        multipart(&api.server, &token, UPLOAD, variables.clone(), ("tides.pdf", pdf.clone()), false).await?;
    ensure!(status == 400 && body.to_string().contains("GraphQL-Preflight"), "{status} {body}");
    ensure!(documents(&api, &token, &space).await?.is_empty(), "a refused upload stored a document");

    // At the limit it is taken; one byte over is 413 naming the setting.
    let mut at_limit = b"%PDF-1.4\n".to_vec();
    at_limit.resize(limit, b' ');
    let (status, body) =
        multipart(&api.server, &token, UPLOAD, variables.clone(), ("big.pdf", at_limit.clone()), true).await?;
    ensure!(status == 200 && body.get("errors").is_none(), "{status} {body}");
    at_limit.push(b' ');
    let (status, body) =
        multipart(&api.server, &token, UPLOAD, variables.clone(), ("bigger.pdf", at_limit), true).await?;
    ensure!(status == 413 && body.to_string().contains("KFS_MAX_UPLOAD_BYTES"), "{status} {body}");
    ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("BAD_USER_INPUT"));

    // The quota counts stored bytes: the 64 KiB file and one PDF fit, a second does not.
    let quota_space = api.space("bob").await?;
    let bob = api.token("bob");
    let variables = json!({ "space": quota_space, "file": null });
    upload(&api, &bob, &quota_space, "one.pdf", pdf.clone()).await?;
    let (_, body) = multipart(&api.server, &bob, UPLOAD, variables.clone(), ("two.pdf", pdf.clone()), true).await?;
    ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("QUOTA_EXCEEDED"));
    // Removing a document gives its bytes back.
    let big = documents(&api, &token, &space).await?;
    let big_id = big.first().and_then(|document| document["id"].as_str()).context("the big upload")?.to_owned();
    let removed = api
        .data(Some(&token), "mutation($id: UUID!) { removeKnowledgeDocument(id: $id) }", json!({ "id": big_id }))
        .await?;
    ensure!(removed["removeKnowledgeDocument"] == true, "{removed}");
    upload(&api, &bob, &quota_space, "two.pdf", pdf.clone()).await?;

    // Roles and scope: a viewer may not upload; another tenant's space does not exist.
    api.member("bob", &quota_space, "carol", "VIEWER").await?;
    let (_, body) =
        multipart(&api.server, &api.token("carol"), UPLOAD, variables.clone(), ("c.pdf", pdf.clone()), true).await?;
    ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("FORBIDDEN"));
    let stranger = TestServer::token("bob", "another-tenant");
    let (_, body) = multipart(&api.server, &stranger, UPLOAD, variables, ("s.pdf", pdf), true).await?;
    ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("NOT_FOUND"));
    api.stop().await;
    Ok(())
}

async fn a_removed_replaced_or_deleted_documents_bytes_are_gone(db: TestDb) -> anyhow::Result<()> {
    let api = api_with_worker(&db, |settings| settings.operator_subjects = vec!["ops-admin".to_owned()]).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let parts =
        async |id: &str| -> anyhow::Result<u64> { Ok(worker::store::files::part_count(&db.db, id.parse()?).await?) };
    let first = upload(&api, &token, &space, "tides.pdf", fixture("tides.pdf")?).await?;
    let first_id = string_at(&first, "/id")?;
    ensure!(parts(&first_id).await? > 0, "no parts stored");
    settled(&api, &token, &space).await?;

    // Replaced: a new revision from the new file; the old bytes are gone.
    let variables = json!({ "id": first_id, "file": null, "rev": 1 });
    let (status, body) =
        multipart(&api.server, &token, REPLACE, variables, ("tides.docx", fixture("tides.docx")?), true).await?;
    ensure!(status == 200 && body.get("errors").is_none(), "{status} {body}");
    ensure!(body.pointer("/data/replaceKnowledgeDocumentFile/revision") == Some(&json!(2)), "{body}");
    let stored = worker::store::files::find(&db.db, first_id.parse()?).await?.context("the file row")?;
    ensure_eq!(stored.byte_size, fixture("tides.docx")?.len() as i64);
    let documents = settled(&api, &token, &space).await?;
    let replaced = by_title(&documents, "tides.pdf")?;
    ensure!(replaced["mediaType"] == "APPLICATION_DOCX" && replaced["indexingStatus"] == "READY", "{replaced}");
    // A stale revision is a conflict.
    let variables = json!({ "id": first_id, "file": null, "rev": 1 });
    let (_, body) =
        multipart(&api.server, &token, REPLACE, variables, ("tides.pdf", fixture("tides.pdf")?), true).await?;
    ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("CONFLICT"));

    // Removed: the bytes go with it.
    api.data(Some(&token), "mutation($id: UUID!) { removeKnowledgeDocument(id: $id) }", json!({ "id": first_id }))
        .await?;
    ensure_eq!(parts(&first_id).await?, 0);
    ensure!(
        worker::store::files::find(&db.db, first_id.parse()?).await?.is_none(),
        "the file row outlived its document"
    );

    // The space deleted: its documents' bytes too.
    let second = upload(&api, &token, &space, "again.pdf", fixture("tides.pdf")?).await?;
    let second_id = string_at(&second, "/id")?;
    api.data(
        Some(&token),
        "mutation($id: UUID!) { deleteKnowledgeSpace(id: $id) { documents } }",
        json!({ "id": space }),
    )
    .await?;
    ensure_eq!(parts(&second_id).await?, 0);
    api.stop().await;
    Ok(())
}

async fn a_subscription_follows_an_upload_until_it_is_ready_and_strangers_see_nothing(
    db: TestDb,
) -> anyhow::Result<()> {
    // No embedded worker: the test runs the extraction step itself, after subscribing.
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let document = upload(&api, &token, &space, "tides.pdf", fixture("tides.pdf")?).await?;
    let id = string_at(&document, "/id")?;
    const FOLLOW: &str = "subscription($id: UUID!) { knowledgeDocumentStatus(documentId: $id) { id indexingStatus indexingError file { pageCount } } }";

    let mut ws = kfs_tests::ws::WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    ws.subscribe("mine", FOLLOW, json!({ "id": id })).await?;
    // Another subject of the tenant outside the space, and a random id: the same answer.
    let mut stranger =
        kfs_tests::ws::WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("mallory"))).await?;
    stranger.subscribe("theirs", FOLLOW, json!({ "id": id })).await?;
    stranger.subscribe("random", FOLLOW, json!({ "id": Uuid::now_v7() })).await?;
    // Each answers NOT_FOUND (an error result) and completes, like a task it may not see.
    let answers = stranger.collect_all(&["theirs", "random"]).await;
    let refused = match answers {
        Ok(answers) => answers.values().all(|payloads| {
            payloads.len() == 1 && payloads[0].pointer("/errors/0/extensions/code") == Some(&json!("NOT_FOUND"))
        }),
        Err(error) => error.to_string().contains("NOT_FOUND"),
    };
    ensure!(refused, "a stranger was not answered NOT_FOUND");

    let mut settings = worker::WorkerSettings::default();
    settings.extract.concurrency = 1;
    let policy = worker::runtime::extraction_policy(&settings);
    let stop = worker::runtime::CancellationToken::new();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let worked = worker::knowledge::uploads::extract_due(&db.db, &policy, &stop, entity::now_millis).await?;
    ensure!(
        matches!(worked, worker::knowledge::uploads::Extraction::File { state: entity::FileState::Done, .. }),
        "{worked:?}"
    );

    let seen = ws.collect("mine").await?;
    let statuses: Vec<&str> = seen
        .iter()
        .filter_map(|payload| payload.pointer("/data/knowledgeDocumentStatus/indexingStatus")?.as_str())
        .collect();
    ensure!(statuses.first() == Some(&"EXTRACTING") && statuses.last() == Some(&"READY"), "{seen:?}");
    let mut order = ["EXTRACTING", "SPLITTING", "READY"].iter();
    ensure!(
        statuses.iter().all(|status| order.any(|expected| expected == status)),
        "out of order or repeated: {statuses:?}"
    );
    let last = seen.last().context("nothing seen")?;
    ensure!(last.pointer("/data/knowledgeDocumentStatus/file/pageCount") == Some(&json!(2)), "{last}");

    // A settled document: one message, then complete.
    ws.subscribe("again", FOLLOW, json!({ "id": id })).await?;
    let again = ws.collect("again").await?;
    ensure_eq!(again.len(), 1);
    api.stop().await;
    Ok(())
}

async fn a_forty_mebibyte_pdf_is_extracted_page_by_page(db: TestDb) -> anyhow::Result<()> {
    let api = api_with_worker(&db, |_| {}).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let pages = 600;
    let bytes = kfs_tests::synthetic::pdf(pages, 40, 40 << 20);
    ensure!(bytes.len() > 40 << 20 && bytes.len() < 50 << 20, "{} bytes", bytes.len());
    let document = upload(&api, &token, &space, "large.pdf", bytes).await?;
    let id: Uuid = string_at(&document, "/id")?.parse()?;
    let mut settled_document = Value::Null;
    wait_until(Duration::from_secs(180), "the large PDF to be extracted", async || {
        let data = api
            .data(
                Some(&token),
                "query($id: UUID!) { knowledgeDocument(id: $id) { indexingStatus indexingError file { pageCount } } }",
                json!({ "id": id }),
            )
            .await?;
        settled_document = data["knowledgeDocument"].clone();
        Ok(!matches!(settled_document["indexingStatus"].as_str(), Some("EXTRACTING" | "SPLITTING")))
    })
    .await?;
    ensure!(settled_document["indexingStatus"] == "READY", "{settled_document}");
    ensure_eq!(settled_document["file"]["pageCount"], json!(pages));
    // Every page's marker sits in a passage of that page.
    use sea_orm::{ColumnTrait as _, EntityTrait as _, QueryFilter as _};
    let passages = entity::knowledge_passage::Entity::find()
        .filter(entity::knowledge_passage::Column::DocumentId.eq(id))
        .all(&db.db)
        .await?;
    for page in [1, 2, pages / 2, pages] {
        let marker = kfs_tests::synthetic::page_marker(page);
        let holder = passages
            .iter()
            .find(|passage| passage.text.contains(&marker))
            .with_context(|| format!("no passage holds {marker}"))?;
        let page = i32::try_from(page)?;
        ensure!(
            holder.page_start == Some(page) && holder.page_end == Some(page),
            "{marker} is in a passage of pages {:?}-{:?}",
            holder.page_start,
            holder.page_end
        );
    }
    api.stop().await;
    Ok(())
}

async fn a_hundred_uploads_at_once_are_extracted_a_bounded_number_at_a_time(db: TestDb) -> anyhow::Result<()> {
    let bound = 2;
    let api = api_with_worker(&db, |settings| settings.worker.extract.concurrency = bound).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let (pdf, docx) = (fixture("tides.pdf")?, fixture("tides.docx")?);
    // Watch the leases: a file in work holds one.
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (conn, watching) = (db.db.clone(), watching.clone());
        tokio::spawn(async move {
            use sea_orm::{ColumnTrait as _, EntityTrait as _, PaginatorTrait as _, QueryFilter as _};
            let mut most = 0;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                let held = entity::knowledge_document_file::Entity::find()
                    .filter(entity::knowledge_document_file::Column::LockToken.is_not_null())
                    .count(&conn)
                    .await?;
                most = most.max(held);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            anyhow::Ok(most)
        })
    };
    let uploads = (0..100).map(|index| {
        let (api, token, space) = (&api, &token, &space);
        let (name, bytes) = if index % 2 == 0 {
            (format!("t{index}.pdf"), pdf.clone())
        } else {
            (format!("t{index}.docx"), docx.clone())
        };
        async move { upload(api, token, space, &name, bytes).await }
    });
    let answered = futures_util::future::join_all(uploads).await;
    for answer in &answered {
        let document = answer.as_ref().map_err(|error| anyhow::anyhow!("{error:#}"))?;
        ensure!(document["indexingStatus"] == "EXTRACTING", "{document}");
    }
    let mut ready = 0;
    wait_until(Duration::from_secs(180), "a hundred uploads to be extracted", async || {
        use sea_orm::{ColumnTrait as _, EntityTrait as _, PaginatorTrait as _, QueryFilter as _};
        ready = entity::knowledge_document_file::Entity::find()
            .filter(entity::knowledge_document_file::Column::State.eq(entity::FileState::Done))
            .count(&db.db)
            .await?;
        Ok(ready == 100)
    })
    .await?;
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.await??;
    ensure!(most >= 1 && most <= bound as u64, "{most} files were in work at once; the bound is {bound}");
    println!("knowledge_uploads: 100 uploads extracted, at most {most} at once (bound {bound})");
    api.stop().await;
    Ok(())
}
