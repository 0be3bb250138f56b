//! Domain enums whose string forms are exactly the seed's CHECK values, and the pure
//! rules about them.

mod channel;
mod chunk;
mod clock;
mod document;
mod event_type;
mod file;
pub mod filters;
mod grant;
mod journal_key;
mod limit_value;
mod limits;
mod mode;
mod outbox_status;
mod role;
mod source_map;
mod stage;

pub use channel::AccessChannel;
pub use chunk::Chunk;
pub use clock::{Clock, now_millis};
pub use document::{IndexingStatus, MediaType};
pub use event_type::ProgressEventType;
pub use file::{FileMediaType, FileState};
pub use filters::{DocumentFilters, FilteredDocument};
pub use grant::GrantDenial;
pub use journal_key::{BundleKey, StageKey};
pub use limit_value::LimitValue;
pub use limits::{Bounded, LimitsError, TaskLimits};
pub use mode::ResearchMode;
pub use outbox_status::OutboxStatus;
pub use role::MemberRole;
pub use source_map::SourceMap;
pub use stage::{LifecycleCommand, Stage, TransitionError};
