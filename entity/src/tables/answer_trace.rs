//! `answer_traces`: final answers with the evidence they cite.
use sea_orm::entity::prelude::*;

use crate::AccessChannel;

/// One answer. Rows with no subject are legacy and never returned by the API.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "answer_traces")]
pub struct Model {
    /// The trace's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space the answer draws on.
    pub knowledge_space_id: Uuid,
    /// The research task that wrote it, if any.
    pub research_task_id: Option<Uuid>,
    /// The question.
    pub query: String,
    /// The extractive answer with numbered citations.
    pub answer: String,
    /// The cited evidence, a JSON array.
    #[sea_orm(column_type = "JsonBinary")]
    pub evidence: Json,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Who asked; null on legacy rows.
    pub subject_id: Option<String>,
    /// The grant the answer was produced under.
    pub permission_snapshot_id: Option<Uuid>,
    /// The grant's revision.
    pub permission_snapshot_revision: Option<i32>,
    /// The grant's channel.
    pub access_channel: Option<AccessChannel>,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
