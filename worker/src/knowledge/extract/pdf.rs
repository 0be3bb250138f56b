//! A PDF's text layer, by `pdftotext` (Debian's poppler-utils) run under `prlimit` with an
//! address-space and CPU limit and a wall-clock timeout: the file goes in on stdin, the
//! text comes out on stdout (pages separated by form feeds) and is read no further than
//! the text limit. poppler opens a PDF that has only an owner password (it restricts
//! editing, not reading) and refuses one with a user password.
use std::process::Stdio;
use std::time::Duration;

use entity::MediaType;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;

use super::{ExtractSettings, Extracted, PAGE_BREAK, Unreadable};

/// Extracts the text of the PDF `bytes`.
pub(super) async fn extract(
    bytes: Vec<u8>,
    settings: &ExtractSettings,
    max_bytes: usize,
) -> Result<Extracted, Unreadable> {
    if !has_end_marker(&bytes) {
        return Err(Unreadable("the PDF is damaged or truncated: it has no end-of-file marker".to_owned()));
    }
    let timeout = Duration::from_millis(settings.timeout_ms.max(1));
    let cpu_seconds = settings.timeout_ms.div_ceil(1000).max(1);
    let mut command = Command::new("prlimit");
    command
        .arg(format!("--as={}", settings.memory_bytes))
        .arg(format!("--cpu={cpu_seconds}"))
        .arg("--")
        .arg(&settings.pdftotext)
        .args(["-enc", "UTF-8", "-eol", "unix", "-", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|error| {
        tracing::error!(error = %error, "starting pdftotext failed");
        not_installed()
    })?;
    let mut stdin = child.stdin.take().ok_or_else(not_installed)?;
    let stdout = child.stdout.take().ok_or_else(not_installed)?;
    let mut stderr = child.stderr.take().ok_or_else(not_installed)?;
    let feed = async move {
        // A reader that stops early closes its end; the rest of the file is not needed.
        let _ = stdin.write_all(&bytes).await;
        drop(stdin);
    };
    let limit = u64::try_from(max_bytes).unwrap_or(u64::MAX);
    // The reader owns `stdout` and closes it as soon as it has read one byte past the
    // limit: `pdftotext` then dies on its next write instead of blocking on a full pipe
    // until the timeout, and the file fails at once, naming the size limit.
    let read = async move {
        let mut text = Vec::new();
        stdout.take(limit.saturating_add(1)).read_to_end(&mut text).await.map(|_| text)
    };
    let errors = async {
        let mut text = String::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_string(&mut text).await;
        text
    };
    let run = async { tokio::join!(feed, read, errors, child.wait()) };
    let (_, text, errors, status) = match tokio::time::timeout(timeout, run).await {
        Ok(done) => done,
        Err(_) => {
            return Err(Unreadable(format!(
                "reading the PDF took longer than {} s (KFS_EXTRACT_TIMEOUT_MS)",
                timeout.as_secs()
            )));
        }
    };
    let text = text.map_err(|_| Unreadable("the PDF's text could not be read".to_owned()))?;
    if text.len() > max_bytes {
        return Err(too_much(max_bytes));
    }
    let status = status.map_err(|_| Unreadable("the PDF's text could not be read".to_owned()))?;
    if !status.success() {
        return Err(classify_failure(status.code(), &errors));
    }
    let text = String::from_utf8_lossy(&text);
    pages_to_text(&text, max_bytes)
}

/// `pdftotext`'s pages (each ended by a form feed) joined by [`PAGE_BREAK`], each without
/// trailing whitespace; an error when no page holds text.
fn pages_to_text(raw: &str, max_bytes: usize) -> Result<Extracted, Unreadable> {
    let mut pages: Vec<&str> = raw.split('\u{c}').map(str::trim_end).collect();
    // The form feed after the last page leaves an empty piece behind it.
    if pages.len() > 1 && pages.last().is_some_and(|last| last.is_empty()) {
        pages.pop();
    }
    if pages.iter().all(|page| page.trim().is_empty()) {
        return Err(Unreadable(
            "the PDF has no text layer (scanned pages?); run text recognition (OCR) on it and upload the result"
                .to_owned(),
        ));
    }
    let text = pages.join(PAGE_BREAK);
    if text.len() > max_bytes {
        return Err(too_much(max_bytes));
    }
    let page_count = i32::try_from(pages.len()).unwrap_or(i32::MAX);
    Ok(Extracted { text, media_type: MediaType::TextPlain, page_count: Some(page_count) })
}

/// Whether `%%EOF` is within the last KiB, as every complete PDF has it.
fn has_end_marker(bytes: &[u8]) -> bool {
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    tail.windows(5).any(|window| window == b"%%EOF")
}

/// What `pdftotext`'s failure means for the person who uploaded the file.
fn classify_failure(code: Option<i32>, errors: &str) -> Unreadable {
    if errors.contains("Incorrect password") {
        return Unreadable(
            "the PDF is encrypted with a password that is needed to open it; upload it without one".to_owned(),
        );
    }
    match code {
        // A signal: the CPU or memory limit ended it.
        None => {
            Unreadable("reading the PDF needed more time or memory than allowed (KFS_EXTRACT_MEMORY_BYTES)".to_owned())
        }
        Some(_) => Unreadable("the PDF is damaged or not a PDF poppler can read".to_owned()),
    }
}

fn too_much(max_bytes: usize) -> Unreadable {
    Unreadable(format!("the file's text is larger than {max_bytes} bytes (KFS_MAX_EXTRACTED_BYTES)"))
}

fn not_installed() -> Unreadable {
    Unreadable(
        "PDF text extraction is not available on this server: pdftotext (Debian's poppler-utils) is not installed"
            .to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_joined_by_breaks() {
        let extracted = pages_to_text("one\n\u{c}two  \n\u{c}", 1000).expect("text");
        assert_eq!(extracted.text, format!("one{PAGE_BREAK}two"));
        assert_eq!(extracted.page_count, Some(2));
        assert!(pages_to_text(" \n\u{c}\n\u{c}", 1000).is_err());
        assert!(pages_to_text("abcdef", 3).is_err());
    }

    #[test]
    fn a_user_password_is_named() {
        let message = classify_failure(Some(1), "Command Line Error: Incorrect password\n").0;
        assert!(message.contains("password"), "{message}");
    }
}
