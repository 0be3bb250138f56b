//! Uploads as a hostile client sends them: a `map` naming one file thousands of times,
//! bodies that stall, no credential, an upload variable naming a file the request does not
//! carry, one file or one text fed to many aliases, Word files built to be slow or large,
//! and a PDF whose text passes the limit. Each answers quickly with a coded error, holds a
//! bounded share of the process, and stores nothing twice.
use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kfs_tests::process::wait_until;
use kfs_tests::server::{TestServer, first_error_code};
use kfs_tests::ws::{Event, WsClient};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use uuid::Uuid;

use crate::api_support::Api;

pub fn tests() -> Vec<DbTest> {
    let reading_pdfs = db_tests![a_pdf_whose_text_passes_the_limit_fails_at_once_naming_it];
    let mut tests: Vec<DbTest> = reading_pdfs.into_iter().map(DbTest::needing_pdftotext).collect();
    tests.extend(db_tests![
        a_map_naming_one_file_thousands_of_times_opens_it_once,
        multipart_bodies_need_a_caller_a_place_and_an_end,
        an_upload_the_request_does_not_carry_is_bad_input_on_every_transport,
        one_upload_is_stored_once_and_a_request_stores_a_bounded_amount,
        word_files_built_to_be_slow_or_large_fail_quickly_saying_why,
        an_upload_over_the_limit_is_answered_before_the_client_finishes_sending,
        many_subscriptions_to_one_document_share_one_reader,
        a_json_body_over_the_limit_is_answered_while_it_is_still_sent,
    ]);
    tests
}

const UPLOAD: &str = "mutation($space: UUID!, $file: Upload!) { \
    uploadKnowledgeDocument(input: { knowledgeSpaceId: $space, file: $file }) { id indexingStatus } }";

const DOCUMENTS: &str = "query($space: UUID!) { knowledgeSpace(id: $space) { documents(first: 100) { \
    id title indexingStatus indexingError content } } }";

/// A server with the embedded worker (it extracts) and `tweak`ed settings.
async fn api_with(db: &TestDb, tweak: impl FnOnce(&mut api::config::Settings)) -> anyhow::Result<Api> {
    let server = TestServer::start_with(&db.url, tweak).await?;
    Ok(Api { server, tenant: format!("tenant-{}", Uuid::new_v4().simple()) })
}

/// The server's `host:port`.
fn address(api: &Api) -> String {
    api.server.server.base_url().trim_start_matches("http://").to_owned()
}

/// Descriptors this process holds (the server runs in it).
fn open_descriptors() -> anyhow::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count())
}

const BOUNDARY: &str = "kfs-hostile-boundary";

/// The start of a multipart body: operations, map, then `file` as part `0`, complete;
/// what a client sends before it stalls (no closing boundary follows).
fn multipart_head(operations: &Value, map: &Value, file: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in [("operations", operations.to_string()), ("map", map.to_string())] {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"0\"; filename=\"f.pdf\"\r\nContent-Type: application/pdf\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(file);
    body.extend_from_slice(b"\r\n");
    body
}

/// Opens a connection and sends a multipart request's headers (announcing `length` bytes)
/// and `body`, nothing more; the caller stalls it or goes on.
async fn send_partial(api: &Api, bearer: Option<&str>, length: usize, body: &[u8]) -> anyhow::Result<TcpStream> {
    let address = address(api);
    let mut stream = TcpStream::connect(&address).await?;
    let authorization = bearer.map(|token| format!("Authorization: Bearer {token}\r\n")).unwrap_or_default();
    let head = format!(
        "POST /graphql HTTP/1.1\r\nHost: {address}\r\n{authorization}GraphQL-Preflight: 1\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    Ok(stream)
}

/// The head of the response arriving on `reader` (status line and headers).
async fn response_head(reader: &mut (impl tokio::io::AsyncRead + Unpin)) -> anyhow::Result<String> {
    let mut read = Vec::new();
    let mut buffer = [0u8; 4096];
    while !read.windows(4).any(|window| window == b"\r\n\r\n") {
        let got = reader.read(&mut buffer).await?;
        ensure!(got > 0, "the connection closed before a response: {:?}", String::from_utf8_lossy(&read));
        read.extend_from_slice(&buffer[..got]);
    }
    Ok(String::from_utf8_lossy(&read).into_owned())
}

/// The status of the response on `stream`, read within `limit`.
async fn status_within(stream: &mut TcpStream, limit: Duration) -> anyhow::Result<u16> {
    let head = tokio::time::timeout(limit, response_head(stream))
        .await
        .with_context(|| format!("no response within {limit:?}"))??;
    head.split_whitespace().nth(1).and_then(|code| code.parse().ok()).with_context(|| format!("no status in {head:?}"))
}

async fn a_map_naming_one_file_thousands_of_times_opens_it_once(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |_| {}).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let operations = json!({ "query": UPLOAD, "variables": { "space": space, "file": null } });
    // Nearly as many paths as a 64 KiB map holds.
    let map = json!({ "0": vec!["variables.file"; 3_500] });
    let head = multipart_head(&operations, &map, b"%PDF-1.4\n");
    // The boundary after the file ends its part (the server has it whole) but says nothing
    // of what follows: the body stalls there.
    let mut stalling = head.clone();
    stalling.extend_from_slice(format!("--{BOUNDARY}").as_bytes());
    let before = open_descriptors()?;
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(send_partial(&api, Some(&token), stalling.len() + 1_000_000, &stalling).await?);
    }
    // Each body is received up to its file, then stalls; wait until the server has read it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = open_descriptors()?.saturating_sub(before);
    println!("four stalled uploads whose map names the file 3,500 times hold {held} descriptors");
    // Four connections and their temporary files, and whatever other tests open meanwhile;
    // one descriptor per path would be 14,000.
    ensure!(held < 500, "four stalled uploads hold {held} descriptors");
    drop(stalled);

    // The same map on a complete request stores the file once.
    let mut body = head.clone();
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    let mut stream = send_partial(&api, Some(&token), body.len(), &body).await?;
    ensure_eq!(status_within(&mut stream, Duration::from_secs(30)).await?, 200);
    let documents = api.data(Some(&token), DOCUMENTS, json!({ "space": space })).await?;
    ensure_eq!(documents["knowledgeSpace"]["documents"].as_array().map(Vec::len), Some(1));
    api.stop().await;
    Ok(())
}

async fn multipart_bodies_need_a_caller_a_place_and_an_end(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| {
        settings.upload_timeout_ms = 1_000;
        settings.max_concurrent_uploads = 4;
    })
    .await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let operations = json!({ "query": UPLOAD, "variables": { "space": space, "file": null } });
    let head = multipart_head(&operations, &json!({ "0": ["variables.file"] }), b"%PDF-1.4\n");

    // No credential: refused at once, while the body is still on its way.
    let mut anonymous = send_partial(&api, None, head.len() + 1_000_000, &head).await?;
    ensure_eq!(status_within(&mut anonymous, Duration::from_secs(5)).await?, 401);

    // A caller's stalled body holds its place (a quarter of the four); a second one waits
    // its turn unread, within the same time limit.
    let started = Instant::now();
    let mut first = send_partial(&api, Some(&token), head.len() + 1_000_000, &head).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut second = send_partial(&api, Some(&token), head.len() + 1_000_000, &head).await?;
    // Another caller still has places.
    let bob_space = api.space("bob").await?;
    let bob = api.token("bob");
    let bob_operations = json!({ "query": UPLOAD, "variables": { "space": bob_space, "file": null } });
    let mut complete = multipart_head(&bob_operations, &json!({ "0": ["variables.file"] }), b"%PDF-1.4\n%%EOF\n");
    complete.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    let mut bobs = send_partial(&api, Some(&bob), complete.len(), &complete).await?;
    ensure_eq!(status_within(&mut bobs, Duration::from_secs(10)).await?, 200);

    // The stalled bodies end at the time limit, 408 (the second's waiting counted), and
    // give their places back.
    ensure_eq!(status_within(&mut first, Duration::from_secs(10)).await?, 408);
    ensure_eq!(status_within(&mut second, Duration::from_secs(10)).await?, 408);
    ensure!(started.elapsed() < Duration::from_secs(8), "the stalled bodies took {:?}", started.elapsed());
    let mut again = send_partial(&api, Some(&token), complete.len(), &complete.clone()).await?;
    let status = status_within(&mut again, Duration::from_secs(10)).await?;
    // alice's request names bob's space: answered (NOT_FOUND in a 200), not refused a place.
    ensure_eq!(status, 200);
    api.stop().await;
    Ok(())
}

async fn an_upload_the_request_does_not_carry_is_bad_input_on_every_transport(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let replace = "mutation($id: UUID!, $file: Upload!) { replaceKnowledgeDocumentFile(id: $id, file: $file) { id } }";
    let cases = [
        (UPLOAD, json!({ "space": space, "file": "#__graphql_file__:0" })),
        (UPLOAD, json!({ "space": space, "file": "#__graphql_file__:7" })),
        (replace, json!({ "id": Uuid::new_v4(), "file": "#__graphql_file__:0" })),
    ];
    for (query, variables) in &cases {
        let (status, body) = api.server.post(Some(&token), query, variables.clone()).await?;
        ensure!(status < 500, "{status} {body}");
        ensure_eq!(first_error_code(&body).as_deref(), Some("BAD_USER_INPUT"));
    }
    // As a literal in the document, too.
    let literal = format!(
        "mutation {{ uploadKnowledgeDocument(input: {{ knowledgeSpaceId: \"{space}\", file: \"#__graphql_file__:0\" }}) {{ id }} }}"
    );
    let (status, body) = api.server.post(Some(&token), &literal, json!({})).await?;
    ensure!(status < 500 && first_error_code(&body).as_deref() == Some("BAD_USER_INPUT"), "{status} {body}");
    // And as a variable's default value.
    let defaulted = "mutation($space: UUID!, $file: Upload = \"#__graphql_file__:0\") { \
        uploadKnowledgeDocument(input: { knowledgeSpaceId: $space, file: $file }) { id } }";
    let (status, body) = api.server.post(Some(&token), defaulted, json!({ "space": space })).await?;
    ensure!(status < 500 && first_error_code(&body).as_deref() == Some("BAD_USER_INPUT"), "{status} {body}");

    // Over a WebSocket: an error for that operation, and the connection goes on.
    let mut ws = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    let (query, variables) = &cases[0];
    ws.subscribe("upload", query, variables.clone()).await?;
    match ws.next_event().await? {
        Event::Error(id, payload) => {
            ensure_eq!(id, "upload");
            // An `error` message's payload is the list of errors.
            ensure_eq!(payload.pointer("/0/extensions/code").and_then(Value::as_str), Some("BAD_USER_INPUT"));
        }
        other => anyhow::bail!("expected an error, got {other:?}"),
    }
    ws.subscribe("viewer", "{ viewer { subjectId } }", json!({})).await?;
    let results = ws.collect("viewer").await?;
    ensure!(results.first().is_some_and(|result| result["data"]["viewer"]["subjectId"] == "alice"), "{results:?}");
    api.stop().await;
    Ok(())
}

async fn one_upload_is_stored_once_and_a_request_stores_a_bounded_amount(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| settings.max_body_bytes = Some(256 * 1024)).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    // One file, three aliases: stored once; the others are told why.
    let aliases = "mutation($space: UUID!, $file: Upload!) { \
        a: uploadKnowledgeDocument(input: { knowledgeSpaceId: $space, file: $file }) { id } \
        b: uploadKnowledgeDocument(input: { knowledgeSpaceId: $space, file: $file }) { id } \
        c: uploadKnowledgeDocument(input: { knowledgeSpaceId: $space, file: $file }) { id } }";
    let operations = json!({ "query": aliases, "variables": { "space": space, "file": null } });
    let form = reqwest::multipart::Form::new()
        .text("operations", operations.to_string())
        .text("map", json!({ "0": ["variables.file"] }).to_string())
        .part("0", reqwest::multipart::Part::bytes(b"%PDF-1.4\n%%EOF\n".to_vec()).file_name("one.pdf"));
    let response = api
        .server
        .http
        .post(api.server.graphql_url())
        .bearer_auth(&token)
        .header("GraphQL-Preflight", "1")
        .multipart(form)
        .send()
        .await?;
    let body: Value = response.json().await?;
    ensure!(body["data"]["a"]["id"].is_string(), "{body}");
    let errors = body["errors"].as_array().context("errors for b and c")?;
    ensure_eq!(errors.len(), 2);
    ensure!(errors.iter().all(|error| error["extensions"]["code"] == "BAD_USER_INPUT"), "{body}");
    let documents = api.data(Some(&token), DOCUMENTS, json!({ "space": space })).await?;
    ensure_eq!(documents["knowledgeSpace"]["documents"].as_array().map(Vec::len), Some(1));

    // One 100 KiB text fed to five aliases: what the 256 KiB body could carry is stored,
    // the rest refused.
    let add = |alias: &str| {
        format!(
            "{alias}: addKnowledgeDocument(input: {{ knowledgeSpaceId: $space, title: \"{alias}\", content: $content }}) {{ id }}"
        )
    };
    let fields: Vec<String> = (0..5).map(|index| add(&format!("t{index}"))).collect();
    let query = format!("mutation($space: UUID!, $content: String!) {{ {} }}", fields.join(" "));
    let text_space = api.space("bob").await?;
    let bob = api.token("bob");
    let body =
        api.call(Some(&bob), &query, json!({ "space": text_space, "content": "word ".repeat(20 * 1024) })).await?;
    let stored = (0..5).filter(|index| body["data"][format!("t{index}")]["id"].is_string()).count();
    ensure_eq!(stored, 2);
    ensure!(body.to_string().contains("body limit"), "{body}");
    // Twelve small ones: ten are stored.
    let fields: Vec<String> = (0..12).map(|index| add(&format!("s{index}"))).collect();
    let query = format!("mutation($space: UUID!, $content: String!) {{ {} }}", fields.join(" "));
    let body = api.call(Some(&bob), &query, json!({ "space": text_space, "content": "small" })).await?;
    let stored = (0..12).filter(|index| body["data"][format!("s{index}")]["id"].is_string()).count();
    ensure_eq!(stored, 10);
    let documents = api.data(Some(&bob), DOCUMENTS, json!({ "space": text_space })).await?;
    ensure_eq!(documents["knowledgeSpace"]["documents"].as_array().map(Vec::len), Some(12));
    api.stop().await;
    Ok(())
}

/// A Word file whose body is `body` (the XML inside `<w:body>`).
fn word_file(body: &str) -> anyhow::Result<Vec<u8>> {
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    archive.start_file("[Content_Types].xml", options)?;
    archive.write_all(b"<?xml version=\"1.0\"?><Types/>")?;
    archive.start_file("word/document.xml", options)?;
    archive.write_all(b"<?xml version=\"1.0\"?><w:document xmlns:w=\"w\"><w:body>")?;
    archive.write_all(body.as_bytes())?;
    archive.write_all(b"</w:body></w:document>")?;
    Ok(archive.finish()?.into_inner())
}

/// Uploads `bytes` as `name` through a multipart request; returns the document's id.
async fn upload(api: &Api, token: &str, space: &str, name: &str, bytes: Vec<u8>) -> anyhow::Result<String> {
    kfs_tests::server::upload_file(&api.server.http, &api.server.graphql_url(), token, space, name, bytes).await
}

/// The space's documents once none is extracting or splitting, by title.
async fn settled(api: &Api, token: &str, space: &str, limit: Duration) -> anyhow::Result<Vec<Value>> {
    let mut last = Vec::new();
    wait_until(limit, "uploads to settle", async || {
        let data = api.data(Some(token), DOCUMENTS, json!({ "space": space })).await?;
        last = data["knowledgeSpace"]["documents"].as_array().cloned().unwrap_or_default();
        Ok(last.iter().all(|document| !matches!(document["indexingStatus"].as_str(), Some("EXTRACTING" | "SPLITTING"))))
    })
    .await?;
    Ok(last)
}

fn by_title<'a>(documents: &'a [Value], title: &str) -> anyhow::Result<&'a Value> {
    documents.iter().find(|document| document["title"] == title).with_context(|| format!("no {title}"))
}

async fn word_files_built_to_be_slow_or_large_fail_quickly_saying_why(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.max_extracted_bytes = 1 << 20;
    })
    .await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let attributes: String = (0..80_000).map(|index| format!(" a{index}=\"\"")).collect();
    let cases = [
        // Quadratic attribute checks took minutes for this; linear reading takes nothing.
        (
            "attributes.docx",
            format!(r#"<w:p><w:pPr><w:pStyle{attributes} w:val="Title"/></w:pPr><w:r><w:t>Styled</w:t></w:r></w:p>"#),
        ),
        // One 64 MiB paragraph against a 1 MiB text limit: refused while it is read.
        ("paragraph.docx", format!("<w:p><w:r><w:t>{}</w:t></w:r></w:p>", "tide ".repeat(13 << 20))),
        // Nesting past the bound.
        ("nested.docx", format!("{}{}", "<w:x>".repeat(100_000), "</w:x>".repeat(100_000))),
        // Characters XML forbids are not kept.
        ("controls.docx", format!("<w:p><w:r><w:t>tide{}s</w:t></w:r></w:p>", "&#1;".repeat(1_000))),
    ];
    let started = Instant::now();
    for (name, body) in &cases {
        upload(&api, &token, &space, name, word_file(body)?).await?;
    }
    let documents = settled(&api, &token, &space, Duration::from_secs(60)).await?;
    let took = started.elapsed();
    let attributes = by_title(&documents, "attributes.docx")?;
    ensure!(attributes["indexingStatus"] == "READY" && attributes["content"] == "# Styled", "{attributes}");
    let paragraph = by_title(&documents, "paragraph.docx")?;
    let error = paragraph["indexingError"].as_str().unwrap_or_default();
    ensure!(paragraph["indexingStatus"] == "FAILED" && error.contains("KFS_MAX_EXTRACTED_BYTES"), "{paragraph}");
    let nested = by_title(&documents, "nested.docx")?;
    let error = nested["indexingError"].as_str().unwrap_or_default();
    ensure!(nested["indexingStatus"] == "FAILED" && error.contains("nests elements deeper"), "{nested}");
    let controls = by_title(&documents, "controls.docx")?;
    ensure!(controls["content"] == "tides", "{controls}");
    ensure!(took < Duration::from_secs(30), "the four files took {took:?}");

    // A time limit too short for a long (but well-formed) file fails it saying so.
    let slow = api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.extract.timeout_ms = 1;
    })
    .await?;
    let slow_space = slow.space("carol").await?;
    let carol = slow.token("carol");
    let paragraphs = "<w:p><w:r><w:t>tide</w:t></w:r></w:p>".repeat(200_000);
    upload(&slow, &carol, &slow_space, "long.docx", word_file(&paragraphs)?).await?;
    let documents = settled(&slow, &carol, &slow_space, Duration::from_secs(60)).await?;
    let long = by_title(&documents, "long.docx")?;
    let error = long["indexingError"].as_str().unwrap_or_default();
    ensure!(long["indexingStatus"] == "FAILED" && error.contains("KFS_EXTRACT_TIMEOUT_MS"), "{long}");
    slow.stop().await;
    api.stop().await;
    Ok(())
}

async fn a_pdf_whose_text_passes_the_limit_fails_at_once_naming_it(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.max_extracted_bytes = 64 * 1024;
        settings.worker.extract.timeout_ms = 60_000;
    })
    .await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    // About 2.6 MB of text: pdftotext goes on writing long after the reader has enough.
    let pdf = kfs_tests::synthetic::pdf(400, 60, 80);
    let started = Instant::now();
    upload(&api, &token, &space, "wordy.pdf", pdf).await?;
    let documents = settled(&api, &token, &space, Duration::from_secs(90)).await?;
    let wordy = by_title(&documents, "wordy.pdf")?;
    let error = wordy["indexingError"].as_str().unwrap_or_default();
    ensure!(wordy["indexingStatus"] == "FAILED" && error.contains("KFS_MAX_EXTRACTED_BYTES"), "{wordy}");
    // Not the 60 s time limit: the reader stopped at the size limit.
    ensure!(started.elapsed() < Duration::from_secs(30), "it failed after {:?}", started.elapsed());
    api.stop().await;
    Ok(())
}

async fn an_upload_over_the_limit_is_answered_before_the_client_finishes_sending(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| settings.max_upload_bytes = 1 << 20).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let operations = json!({ "query": UPLOAD, "variables": { "space": space, "file": null } });
    let head = multipart_head(&operations, &json!({ "0": ["variables.file"] }), b"");
    // Strip the empty file's line end: the file's bytes follow.
    let head = &head[..head.len() - 2];
    for (label, chunk, pause) in
        [("throttled", 64 * 1024, Duration::from_millis(30)), ("fast", 1 << 20, Duration::ZERO)]
    {
        let total = 64 << 20;
        let mut stream = send_partial(&api, Some(&token), head.len() + total, head).await?;
        let mut sent = 0usize;
        let mut passed_at = None;
        let mut buffer = vec![b'x'; chunk];
        buffer[..5].copy_from_slice(b"%PDF-");
        // Send until the server answers (it may also stop reading and reset; an answer
        // is what counts).
        let (mut reader, mut writer) = stream.split();
        let answered = async {
            let head = response_head(&mut reader).await?;
            Ok::<_, anyhow::Error>((Instant::now(), head))
        };
        let sending = async {
            while sent < total {
                if writer.write_all(&buffer).await.is_err() {
                    break;
                }
                sent += buffer.len();
                if passed_at.is_none() && sent > 1 << 20 {
                    passed_at = Some(Instant::now());
                }
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            std::future::pending::<()>().await;
        };
        let (at, head) = tokio::select! {
            answered = answered => answered?,
            () = sending => unreachable!("sending never ends by itself"),
        };
        ensure!(head.starts_with("HTTP/1.1 413"), "{label}: {head}");
        let passed = passed_at.context("the limit was never passed")?;
        let after = at.saturating_duration_since(passed);
        println!("413 for a {label} sender: {after:?} after the limit was passed, {sent} bytes sent");
        ensure!(after < Duration::from_millis(500), "{label}: answered {after:?} after the limit was passed");
        ensure!(sent < 16 << 20, "{label}: the client sent {sent} bytes before the answer");
    }
    api.stop().await;
    Ok(())
}

/// The CPU time (user and system, in clock ticks of 1/100 s) process `pid` has used.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')').context("a stat line")?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index).and_then(|field| field.parse::<u64>().ok()).context("a stat field");
    Ok(ticks(11)? + ticks(12)?)
}

/// `db_statements_total` of the api process at `base`.
async fn statements(http: &reqwest::Client, base: &str) -> anyhow::Result<f64> {
    let text = http.get(format!("{base}/metrics")).send().await?.text().await?;
    text.lines()
        .find_map(|line| line.strip_prefix("db_statements_total ").and_then(|value| value.trim().parse().ok()))
        .context("no db_statements_total in /metrics")
}

async fn many_subscriptions_to_one_document_share_one_reader(db: TestDb) -> anyhow::Result<()> {
    use kfs_tests::process::{ApiProcess, Binaries, api_command};
    let binaries = Binaries::build().await?;
    // No worker: the upload stays EXTRACTING while it is followed.
    let api = ApiProcess::start(api_command(&binaries.api, &db.url)).await?;
    let base = format!("http://{}", api.addr);
    let http = reqwest::Client::new();
    let tenant = format!("tenant-{}", Uuid::new_v4().simple());
    let token = TestServer::token("alice", &tenant);
    let client = kfs_tests::server::GraphqlClient::new(api.graphql_url(), token.clone());
    let space = client.run("mutation { createKnowledgeSpace(input: { name: \"S\" }) { id } }", json!({})).await?;
    let space = space["createKnowledgeSpace"]["id"].as_str().context("space")?.to_owned();
    let pdf = b"%PDF-1.4\n%%EOF\n".to_vec();
    let document = kfs_tests::server::upload_file(&http, &api.graphql_url(), &token, &space, "f.pdf", pdf).await?;

    // A thousand subscriptions of one viewer, on ten sockets.
    let follow = "subscription($id: UUID!) { knowledgeDocumentStatus(documentId: $id) { indexingStatus } }";
    let mut sockets = Vec::new();
    for socket in 0..10 {
        let mut ws = WsClient::connect_and_init(&api.ws_url(), Some(&token)).await?;
        for index in 0..100 {
            ws.subscribe(&format!("s{socket}-{index}"), follow, json!({ "id": document })).await?;
        }
        for _ in 0..100 {
            match ws.next_event().await? {
                Event::Next(_, payload) => {
                    ensure!(payload["data"]["knowledgeDocumentStatus"]["indexingStatus"] == "EXTRACTING", "{payload}")
                }
                other => anyhow::bail!("expected the first status, got {other:?}"),
            }
        }
        sockets.push(ws);
    }
    // Two seconds of following: one reader's statements, not one per subscription (which
    // read two or three rows five times a second each: about 25,000 here).
    let before = statements(&http, &base).await?;
    let cpu_before = cpu_ticks(api.process.id())?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let read = statements(&http, &base).await? - before;
    let cpu = (cpu_ticks(api.process.id())? - cpu_before) as f64 / 100.0 / 2.0;
    // The share of a core is printed, not asserted: it depends on the machine's load.
    println!("1,000 document subscriptions: {read} statements and {:.1} % of a core in 2 s", cpu * 100.0);
    ensure!(read < 200.0, "1,000 subscriptions cost {read} statements in two seconds");

    // The shared reader still ends every subscription when the document goes.
    let removed =
        client.run("mutation($id: UUID!) { removeKnowledgeDocument(id: $id) }", json!({ "id": document })).await?;
    ensure!(removed["removeKnowledgeDocument"] == true, "{removed}");
    for ws in &mut sockets {
        let mut ended = 0;
        while ended < 100 {
            match ws.next_event().await? {
                Event::Error(_, payload) | Event::Next(_, payload) => {
                    ensure!(payload.to_string().contains("NOT_FOUND"), "{payload}");
                    ended += 1;
                }
                Event::Complete(_) => {}
                other => anyhow::bail!("expected NOT_FOUND, got {other:?}"),
            }
        }
    }
    Ok(())
}

async fn a_json_body_over_the_limit_is_answered_while_it_is_still_sent(db: TestDb) -> anyhow::Result<()> {
    let api = api_with(&db, |settings| settings.max_body_bytes = Some(1 << 20)).await?;
    let token = api.token("alice");
    let address = address(&api);
    // Announced by its length (refused before a byte is read), and chunked (refused once
    // the limit is met while reading).
    for framing in ["Content-Length: 67108864", "Transfer-Encoding: chunked"] {
        let mut stream = TcpStream::connect(&address).await?;
        let head = format!(
            "POST /graphql HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\n{framing}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await?;
        let chunked = framing.starts_with("Transfer");
        let piece = vec![b' '; 64 * 1024];
        let (mut reader, mut writer) = stream.split();
        let mut sent = 0usize;
        let sending = async {
            loop {
                let written = if chunked {
                    let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                    framed.extend_from_slice(&piece);
                    framed.extend_from_slice(b"\r\n");
                    writer.write_all(&framed).await
                } else {
                    writer.write_all(&piece).await
                };
                if written.is_err() {
                    std::future::pending::<()>().await;
                }
                sent += piece.len();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let answered = response_head(&mut reader);
        let head = tokio::time::timeout(Duration::from_secs(30), async {
            tokio::select! {
                answered = answered => answered,
                () = sending => unreachable!("sending never ends by itself"),
            }
        })
        .await
        .context("no answer within 30 s")??;
        ensure!(head.starts_with("HTTP/1.1 413"), "{framing}: {head}");
        // Answered long before the 64 MiB were sent: at or soon after the 1 MiB limit.
        ensure!(sent < 16 << 20, "{framing}: {sent} bytes were sent before the answer");
    }
    api.stop().await;
    Ok(())
}
