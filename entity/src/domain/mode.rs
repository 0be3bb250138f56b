use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// How hard a research task works; the seed's `research_task_jobs_mode_ck` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum ResearchMode {
    /// The engine picks, from the query's shape.
    #[sea_orm(string_value = "auto")]
    Auto,
    /// One sub-query, one round.
    #[sea_orm(string_value = "fast")]
    Fast,
    /// A few sub-queries.
    #[sea_orm(string_value = "research")]
    Research,
    /// More sub-queries over more rounds.
    #[sea_orm(string_value = "deep")]
    Deep,
}

impl ResearchMode {
    /// The seed's string for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Fast => "fast",
            Self::Research => "research",
            Self::Deep => "deep",
        }
    }
}
