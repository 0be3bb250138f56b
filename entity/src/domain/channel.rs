use sea_orm::Iterable;
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// How a caller reached the service; the seed's `*_channel_ck` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum AccessChannel {
    /// A person in a frontend app, with a JWT.
    #[sea_orm(string_value = "interactive")]
    Interactive,
    /// A service client with an API key.
    #[sea_orm(string_value = "service_api")]
    ServiceApi,
    /// A Model Context Protocol client, with a JWT.
    #[sea_orm(string_value = "mcp")]
    Mcp,
    /// An autonomous agent, with a JWT.
    #[sea_orm(string_value = "agent")]
    Agent,
}

impl AccessChannel {
    /// The seed's string for this channel.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interactive => "interactive",
            Self::ServiceApi => "service_api",
            Self::Mcp => "mcp",
            Self::Agent => "agent",
        }
    }

    /// Parses the seed's string form.
    pub fn parse(value: &str) -> Option<Self> {
        Self::iter().find(|channel| channel.as_str() == value)
    }
}
