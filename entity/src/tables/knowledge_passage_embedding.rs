//! `knowledge_passage_embeddings`: one vector per passage and embedding model, stored
//! portably (little-endian `f32`s in a `bytea`/`BLOB`) and scored in Rust.
use sea_orm::entity::prelude::*;

/// A passage's embedding by one model.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_passage_embeddings")]
pub struct Model {
    /// The passage.
    #[sea_orm(primary_key, auto_increment = false)]
    pub passage_id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// The model that embedded it; vectors of another model are never compared with it.
    pub model: String,
    /// The vector's length.
    pub dimensions: i32,
    /// `dimensions` little-endian `f32`s.
    #[sea_orm(column_type = "VarBinary(StringLen::None)")]
    pub vector: Vec<u8>,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
