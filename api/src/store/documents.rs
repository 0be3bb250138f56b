//! `knowledge_documents`: what research retrieves from. Inserting is enough to index a
//! document: the full-text index follows the table (a generated tsvector on PostgreSQL,
//! triggers into FTS5 on SQLite).
use entity::{knowledge_document as document, now_millis};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

/// What a new document needs.
#[derive(Debug, Clone)]
pub struct NewDocument {
    /// The space's tenant.
    pub tenant_id: String,
    /// The space it belongs to.
    pub knowledge_space_id: Uuid,
    /// A short title.
    pub title: String,
    /// The full text.
    pub content: String,
    /// The subject adding it.
    pub created_by: String,
}

/// Inserts the document.
pub async fn add<C: ConnectionTrait>(conn: &C, new: NewDocument) -> Result<document::Model, DbErr> {
    let now = now_millis();
    let row = document::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(new.tenant_id),
        knowledge_space_id: Set(new.knowledge_space_id),
        title: Set(new.title),
        content: Set(new.content),
        created_by: Set(new.created_by),
        created_at: Set(now),
        updated_at: Set(now),
    };
    document::Entity::insert(row).exec_with_returning(conn).await
}

/// The newest documents of a space, at most `limit`.
pub async fn list_for_space<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    limit: u64,
) -> Result<Vec<document::Model>, DbErr> {
    document::Entity::find()
        .filter(document::Column::TenantId.eq(tenant_id))
        .filter(document::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .order_by_desc(document::Column::CreatedAt)
        .order_by_desc(document::Column::Id)
        .limit(limit)
        .all(conn)
        .await
}
