//! `webhook_delivery_attempts`: what each attempt of a delivery got.
use sea_orm::entity::prelude::*;

/// One attempt.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_delivery_attempts")]
pub struct Model {
    /// The attempt's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The delivery.
    pub delivery_id: Uuid,
    /// 1 for the first.
    pub attempt: i32,
    /// The HTTP status, if a response came.
    pub status_code: Option<i32>,
    /// How long it took.
    pub latency_ms: i64,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// Epoch milliseconds.
    pub attempted_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
