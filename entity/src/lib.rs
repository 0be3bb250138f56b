//! SeaORM entities for every table of the service, plus the domain enums and the stage
//! rules. This crate knows nothing of GraphQL, HTTP or tokio tasks: it is the vocabulary
//! the other crates share. See `README.md` beside this crate.

pub mod domain;
pub mod tables;

pub use domain::{
    AccessChannel, Clock, LifecycleCommand, MemberRole, OutboxStatus, ProgressEventType, ResearchMode, Stage,
    TransitionError, now_millis,
};
pub use tables::*;
