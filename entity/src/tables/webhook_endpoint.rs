//! `webhook_endpoints`: where a principal wants its own tasks' events delivered.
use sea_orm::entity::prelude::*;

/// One endpoint.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    /// The endpoint's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space whose tasks it follows.
    pub knowledge_space_id: Uuid,
    /// The subject that registered it; it receives that subject's tasks only.
    pub subject_id: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The event types it wants (`research_task.*`), a JSON array.
    #[sea_orm(column_type = "JsonBinary")]
    pub events: Json,
    /// The Standard Webhooks signing secret (`whsec_…`). Stored as is: signing needs it.
    pub secret: String,
    /// When it was disabled (no more deliveries), epoch milliseconds.
    pub disabled_at: Option<i64>,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
