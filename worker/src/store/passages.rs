//! Passages as search reads them: by full text (PostgreSQL `ts_rank` over the GIN-indexed
//! tsvector, SQLite FTS5 `bm25`), their stored vectors, and passages by id. Every read is
//! filtered by tenant and space: another space's passages are never candidates. Ranking,
//! cosine similarity and fusion are `knowledge::search`'s.
use entity::knowledge_passage_embedding as embedding;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect, Statement,
};
use uuid::Uuid;

use super::backend::{Backend, on_backend};
pub use super::rows::{PassageRow, Scope};

/// The best `limit` passages for `terms` (words safe to quote), best first.
pub async fn full_text<C: ConnectionTrait>(
    conn: &C,
    scope: Scope<'_>,
    terms: &[String],
    limit: u64,
) -> Result<Vec<PassageRow>, DbErr> {
    if terms.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let backend = conn.get_database_backend();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (sql, values) = on_backend!(conn, |B| (B::STATEMENTS.full_text, B::full_text_values(scope, terms, limit)));
    let statement = Statement::from_sql_and_values(backend, sql, values);
    PassageRow::find_by_statement(statement).all(conn).await
}

/// [`full_text`] for several queries' terms at once: each list's best `limit` passages,
/// in the order given. On PostgreSQL one statement for them all (a research plan's
/// sub-queries are searched together); SQLite, in process, searches each in turn.
pub async fn full_text_for_queries<C: ConnectionTrait>(
    conn: &C,
    scope: Scope<'_>,
    queries: &[Vec<String>],
    limit: u64,
) -> Result<Vec<Vec<PassageRow>>, DbErr> {
    let searched: Vec<&[String]> = queries.iter().map(Vec::as_slice).filter(|terms| !terms.is_empty()).collect();
    if searched.is_empty() || limit == 0 {
        return Ok(queries.iter().map(|_| Vec::new()).collect());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let lists = on_backend!(conn, |B| B::full_text_for_queries(conn, scope, &searched, limit).await)?;
    // Back in the order asked, with nothing for the queries that had no terms.
    let mut lists = lists.into_iter();
    Ok(queries
        .iter()
        .map(|terms| if terms.is_empty() { Vec::new() } else { lists.next().unwrap_or_default() })
        .collect())
}

/// A passage's stored vector.
#[derive(Debug, Clone, FromQueryResult)]
pub struct StoredVector {
    /// The passage.
    pub passage_id: Uuid,
    /// Its vector, little-endian `f32`s.
    pub vector: Vec<u8>,
}

/// Up to `limit` of the space's stored vectors by `model` with `dimensions`, the oldest
/// passages first.
pub async fn vectors<C: ConnectionTrait>(
    conn: &C,
    scope: Scope<'_>,
    model: &str,
    dimensions: i32,
    limit: u64,
) -> Result<Vec<StoredVector>, DbErr> {
    let mut query = embedding::Entity::find()
        .select_only()
        .columns([embedding::Column::PassageId, embedding::Column::Vector])
        .filter(embedding::Column::TenantId.eq(scope.tenant_id))
        .filter(embedding::Column::KnowledgeSpaceId.eq(scope.knowledge_space_id))
        .filter(embedding::Column::Model.eq(model))
        .filter(embedding::Column::Dimensions.eq(dimensions));
    if let Some(documents) = scope.documents {
        use entity::knowledge_passage as passage;
        let of_documents = sea_orm::sea_query::Query::select()
            .column(passage::Column::Id)
            .from(passage::Entity)
            .and_where(passage::Column::TenantId.eq(scope.tenant_id))
            .and_where(passage::Column::KnowledgeSpaceId.eq(scope.knowledge_space_id))
            .and_where(passage::Column::DocumentId.is_in(documents.iter().copied()))
            .to_owned();
        query = query.filter(embedding::Column::PassageId.in_subquery(of_documents));
    }
    query.order_by_asc(embedding::Column::PassageId).limit(limit).into_model::<StoredVector>().all(conn).await
}

/// The passages with these ids in the scope (score 0).
pub async fn by_ids<C: ConnectionTrait>(conn: &C, scope: Scope<'_>, ids: &[Uuid]) -> Result<Vec<PassageRow>, DbErr> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let (sql, ids) = on_backend!(conn, |B| (B::STATEMENTS.passages_by_ids, B::id_list(ids)));
    let values = [scope.tenant_id.into(), scope.knowledge_space_id.into(), ids];
    PassageRow::find_by_statement(Statement::from_sql_and_values(conn.get_database_backend(), sql, values))
        .all(conn)
        .await
}

/// One passage of the tenant, by id.
pub async fn find<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    id: Uuid,
) -> Result<Option<entity::knowledge_passage::Model>, DbErr> {
    use sea_orm::{ColumnTrait as _, EntityTrait as _, QueryFilter as _};
    entity::knowledge_passage::Entity::find_by_id(id)
        .filter(entity::knowledge_passage::Column::TenantId.eq(tenant_id))
        .one(conn)
        .await
}

/// Where a stored passage's quotes are located: its document revision and offset map.
#[derive(Debug, Clone, FromQueryResult)]
pub struct PassagePlaceRow {
    /// The passage.
    pub id: Uuid,
    /// The document revision it was split from.
    pub document_revision: i32,
    /// Its offset map as stored (null for passages split before maps were recorded).
    pub source_map: Option<String>,
}

/// The places of the tenant's passages with these ids that are still stored.
pub async fn places<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    ids: &[Uuid],
) -> Result<Vec<PassagePlaceRow>, DbErr> {
    use entity::knowledge_passage as passage;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    passage::Entity::find()
        .select_only()
        .columns([passage::Column::Id, passage::Column::DocumentRevision, passage::Column::SourceMap])
        .filter(passage::Column::TenantId.eq(tenant_id))
        .filter(passage::Column::Id.is_in(ids.iter().copied()))
        .into_model::<PassagePlaceRow>()
        .all(conn)
        .await
}
