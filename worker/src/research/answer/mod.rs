//! The answer as it is written: engines push what the model writes through a
//! [`Composer`], which checks citations ([`CitationFilter`]) and hands what is safe to show
//! to the run's [`AnswerSink`]; the pipeline writes the sink to the task's answer draft at
//! a bounded rate (`crate::pipeline`), where `researchTaskAnswer` subscribers read it.
mod citations;

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

pub use citations::CitationFilter;

/// Where an engine's answer goes while it is written. Cheap to clone; clones share it.
#[derive(Clone, Default)]
pub struct AnswerSink {
    state: Arc<Mutex<SinkState>>,
    changed: Arc<Notify>,
}

#[derive(Default)]
struct SinkState {
    text: String,
    /// Whether the text changed since the last snapshot.
    dirty: bool,
    /// Whether generation started over since the last snapshot.
    restarted: bool,
}

/// What the sink held when the pipeline took it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The answer so far in the current generation.
    pub text: String,
    /// Whether it belongs to a generation the draft has not seen yet.
    pub restarted: bool,
}

impl AnswerSink {
    /// Adds checked text to the answer.
    pub fn append(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut state = self.lock();
        state.text.push_str(text);
        state.dirty = true;
        drop(state);
        self.changed.notify_one();
    }

    /// Generation starts over (a cut stream is retried): what was shown is void.
    pub fn restart(&self) {
        let mut state = self.lock();
        state.text.clear();
        state.restarted = true;
        state.dirty = false;
    }

    /// The answer so far, if it changed since the last snapshot.
    pub fn take_snapshot(&self) -> Option<Snapshot> {
        let mut state = self.lock();
        if !state.dirty {
            return None;
        }
        state.dirty = false;
        let snapshot = Snapshot { text: state.text.clone(), restarted: std::mem::take(&mut state.restarted) };
        Some(snapshot)
    }

    /// A snapshot could not be written: offer it again.
    pub(crate) fn retry_later(&self, snapshot: &Snapshot) {
        let mut state = self.lock();
        state.dirty = true;
        state.restarted |= snapshot.restarted;
        drop(state);
        self.changed.notify_one();
    }

    /// Waits until something is appended.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An answer being written over numbered evidence: model output in, checked text out to
/// the sink, and at the end the answer with what it cites.
pub struct Composer<'a> {
    sink: &'a AnswerSink,
    filter: CitationFilter,
    evidence: usize,
    text: String,
    written: String,
}

/// A finished answer: its text, the evidence it cites (0-based indexes, in the order of the
/// numbers in the text) and the citations that were removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Composed {
    /// The checked answer.
    pub text: String,
    /// `cited[0]` is what `[1]` names.
    pub cited: Vec<usize>,
    /// Citations of evidence that does not exist, as written.
    pub removed: Vec<String>,
    /// The answer as the model wrote it, its citations unchecked and numbered as the
    /// evidence was (`[n]` is the n-th item).
    pub written: String,
}

impl<'a> Composer<'a> {
    /// Starts an answer over `evidence` numbered items.
    pub fn new(sink: &'a AnswerSink, evidence: usize) -> Self {
        Self { sink, filter: CitationFilter::new(evidence), evidence, text: String::new(), written: String::new() }
    }

    /// The model wrote `piece`.
    pub fn push(&mut self, piece: &str) {
        self.written.push_str(piece);
        let released = self.filter.push(piece);
        self.text.push_str(&released);
        self.sink.append(&released);
    }

    /// The model's output is void (a cut stream is retried): start over.
    pub fn restart(&mut self) {
        self.filter = CitationFilter::new(self.evidence);
        self.text.clear();
        self.written.clear();
        self.sink.restart();
    }

    /// The model finished.
    pub fn finish(mut self) -> Composed {
        let released = self.filter.finish();
        self.text.push_str(&released);
        self.sink.append(&released);
        Composed {
            text: self.text,
            cited: self.filter.cited().to_vec(),
            removed: self.filter.removed().to_vec(),
            written: self.written,
        }
    }
}
