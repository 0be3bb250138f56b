#![doc = include_str!("../README.md")]

pub mod domain;
pub mod tables;

pub use domain::{
    AccessChannel, Clock, IndexingStatus, LifecycleCommand, MediaType, MemberRole, OutboxStatus, ProgressEventType,
    ResearchMode, Stage, TransitionError, now_millis,
};
pub use tables::*;
