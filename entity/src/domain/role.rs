use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// A member's role in a knowledge space. Every member may run research; editors and owners
/// add documents; owners manage members and API keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum MemberRole {
    /// Manages members and keys, adds documents, researches.
    #[sea_orm(string_value = "owner")]
    Owner,
    /// Adds documents, researches.
    #[sea_orm(string_value = "editor")]
    Editor,
    /// Researches.
    #[sea_orm(string_value = "viewer")]
    Viewer,
}

impl MemberRole {
    /// Whether this role may add documents to the space.
    pub fn can_write_documents(self) -> bool {
        matches!(self, Self::Owner | Self::Editor)
    }

    /// Whether this role may manage members and API keys.
    pub fn can_manage(self) -> bool {
        matches!(self, Self::Owner)
    }

    /// The permissions a grant issued to this role records.
    pub fn permissions(self) -> Vec<&'static str> {
        let mut granted = vec!["research.run", "research.read"];
        if self.can_write_documents() {
            granted.push("documents.write");
        }
        if self.can_manage() {
            granted.push("space.manage");
        }
        granted
    }
}
