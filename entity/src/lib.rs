#![doc = include_str!("../README.md")]

pub mod domain;
pub mod tables;

pub use domain::{
    AccessChannel, Chunk, Clock, DocumentFilters, FileMediaType, FileState, FilteredDocument, GrantDenial, IndexingStatus,
    LifecycleCommand, LimitsError, MediaType, MemberRole, OutboxStatus, ProgressEventType, ResearchMode, Stage,
    TaskLimits, TransitionError, now_millis,
};
pub use tables::*;
