//! Text from uploaded files, in the worker: what a file is (from its bytes, [`detect`]),
//! its text and, for a PDF, where each page starts. PDFs are read by Debian's `pdftotext`
//! (poppler, GPL) as a separate program with a time and memory limit ([`pdf`]); Word
//! files by reading their XML here as it decompresses, with its size, nesting and time
//! bounded ([`docx`]). Either way the text is bounded by `KFS_MAX_EXTRACTED_BYTES` (and
//! the time by `KFS_EXTRACT_TIMEOUT_MS`), and a file that cannot be read
//! ends with a sentence saying why, for the document's `indexingError`.
mod docx;
mod pdf;

use entity::{FileMediaType, MediaType};
use serde::Deserialize;

pub use super::pages::PAGE_BREAK;

/// How uploaded files are read (`KFS_EXTRACT_*`; the text limit is
/// `KFS_MAX_EXTRACTED_BYTES`, on the worker's settings).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ExtractSettings {
    /// Files one process extracts at once.
    pub concurrency: usize,
    /// How long one extraction may take, in milliseconds.
    pub timeout_ms: u64,
    /// The address space `pdftotext` may use, in bytes.
    pub memory_bytes: u64,
    /// The `pdftotext` program (a name on `PATH` or a path).
    pub pdftotext: String,
    /// The most bytes a Word file's body may decompress to; past it the file is refused
    /// as a likely ZIP bomb.
    pub max_unzipped_bytes: u64,
}

impl Default for ExtractSettings {
    fn default() -> Self {
        Self {
            concurrency: 2,
            timeout_ms: 120_000,
            memory_bytes: 1 << 30,
            pdftotext: "pdftotext".to_owned(),
            max_unzipped_bytes: 256 << 20,
        }
    }
}

/// A file's text, ready to be split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    /// The text: a PDF's pages joined by a line holding a form feed; a Word file as
    /// Markdown (headings, paragraphs, tables).
    pub text: String,
    /// How the text is split: plain text for a PDF, Markdown for a Word file.
    pub media_type: MediaType,
    /// A PDF's page count.
    pub page_count: Option<i32>,
}

/// Why a file gave no text, as a sentence for `indexingError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

/// What the bytes are: a PDF starts with `%PDF-` (within its first KiB, as readers
/// allow); a Word file is a ZIP archive (its body is checked when it is read).
pub fn detect(bytes: &[u8]) -> Option<FileMediaType> {
    let head = &bytes[..bytes.len().min(1024)];
    if head.windows(5).any(|window| window == b"%PDF-") {
        Some(FileMediaType::Pdf)
    } else if bytes.starts_with(b"PK\x03\x04") {
        Some(FileMediaType::Docx)
    } else {
        None
    }
}

/// A short name for what the bytes look like, for a mismatch's message.
fn looks_like(bytes: &[u8]) -> &'static str {
    const SIGNATURES: &[(&[u8], &str)] = &[
        (b"\x89PNG", "a PNG image"),
        (b"\xff\xd8\xff", "a JPEG image"),
        (b"GIF8", "a GIF image"),
        (b"\xd0\xcf\x11\xe0", "an old-style (binary) Office file"),
        (b"{\\rtf", "an RTF file"),
    ];
    SIGNATURES
        .iter()
        .find(|(signature, _)| bytes.starts_with(signature))
        .map_or(if std::str::from_utf8(bytes).is_ok() { "text" } else { "neither" }, |(_, name)| name)
}

/// Reads the text of a file uploaded as `claimed`, no more than `max_bytes` of it. Runs
/// blocking work (a Word file's XML) on the blocking pool and `pdftotext` as a child
/// process, so the async threads never wait on either.
pub async fn extract(
    bytes: Vec<u8>,
    claimed: FileMediaType,
    settings: &ExtractSettings,
    max_bytes: usize,
) -> Result<Extracted, Unreadable> {
    match detect(&bytes) {
        Some(FileMediaType::Pdf) => pdf::extract(bytes, settings, max_bytes).await,
        Some(FileMediaType::Docx) => {
            let timeout = std::time::Duration::from_millis(settings.timeout_ms.max(1));
            let bounds = docx::Bounds {
                max_unzipped: settings.max_unzipped_bytes,
                max_bytes,
                deadline: std::time::Instant::now() + timeout,
                timeout_seconds: timeout.as_secs().max(1),
            };
            let read = tokio::task::spawn_blocking(move || docx::extract(&bytes, bounds));
            read.await.unwrap_or_else(|_| Err(Unreadable("the Word file could not be read".to_owned())))
        }
        None => {
            let kind = match looks_like(&bytes) {
                "neither" => "neither a PDF nor a Word file".to_owned(),
                other => format!("{other}, not a PDF or Word file"),
            };
            Err(Unreadable(format!("the file was uploaded as .{} but its bytes are {kind}", claimed.extension())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_from_bytes_not_names() {
        assert_eq!(detect(b"%PDF-1.7\n..."), Some(FileMediaType::Pdf));
        assert_eq!(detect(b"\n\n%PDF-1.4"), Some(FileMediaType::Pdf));
        assert_eq!(detect(b"PK\x03\x04rest"), Some(FileMediaType::Docx));
        assert_eq!(detect(b"\x89PNG\r\n\x1a\n"), None);
        assert_eq!(looks_like(b"\x89PNG\r\n\x1a\n"), "a PNG image");
    }
}
