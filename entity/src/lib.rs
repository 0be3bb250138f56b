#![doc = include_str!("../README.md")]

pub mod domain;
mod journal;
pub mod tables;

pub use domain::{
    AccessChannel, BundleKey, Chunk, Clock, DocumentFilters, FileMediaType, FileState, FilteredDocument, GrantDenial,
    IndexingStatus, LifecycleCommand, LimitsError, MediaType, MemberRole, OutboxStatus, ProgressEventType,
    ResearchMode, SourceMap, Stage, StageKey, TaskLimits, TransitionError, now_millis,
};
pub use journal::Journal;
pub use tables::*;
