//! Passages as search reads them: by full text (PostgreSQL `ts_rank` over the GIN-indexed
//! tsvector, SQLite FTS5 `bm25`), their stored vectors, and passages by id. Every read is
//! filtered by tenant and space: another space's passages are never candidates. Ranking,
//! cosine similarity and fusion are `knowledge::search`'s.
use entity::knowledge_passage_embedding as embedding;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect, Statement,
};
use uuid::Uuid;

use super::{Dialect, dialect};

/// Where to search.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The space's tenant.
    pub tenant_id: &'a str,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// Only passages of these documents (a task's `limits.filters`, resolved by
    /// `documents::matching`); `None` for every document of the space.
    pub documents: Option<&'a [Uuid]>,
}

impl<'a> Scope<'a> {
    /// Every document of the space.
    pub fn space(tenant_id: &'a str, knowledge_space_id: Uuid) -> Self {
        Self { tenant_id, knowledge_space_id, documents: None }
    }
}

/// A passage as search reads it, with a ranker's score.
#[derive(Debug, Clone, FromQueryResult)]
pub struct PassageRow {
    /// The passage.
    pub id: Uuid,
    /// Its document.
    pub document_id: Uuid,
    /// The document's title.
    pub title: String,
    /// Its text.
    pub text: String,
    /// Where it starts in the document's content, in code points.
    pub char_start: i32,
    /// Where it ends (exclusive).
    pub char_end: i32,
    /// The headings above it, a JSON array.
    pub heading_path: serde_json::Value,
    /// The first page of a PDF it comes from.
    pub page_start: Option<i32>,
    /// The last page of a PDF it comes from.
    pub page_end: Option<i32>,
    /// Where its document came from, if its author said.
    pub source_uri: Option<String>,
    /// The ranker's score (0 where none ranked it).
    pub score: f64,
}

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
    let statement = match dialect(conn) {
        Dialect::Postgres => Statement::from_sql_and_values(
            backend,
            super::postgres::FULL_TEXT,
            [
                scope.tenant_id.into(),
                scope.knowledge_space_id.into(),
                terms.join(" or ").into(),
                limit.into(),
                postgres_documents(scope),
            ],
        ),
        Dialect::Sqlite => {
            let matched: Vec<String> = terms.iter().map(|term| format!("\"{term}\"")).collect();
            Statement::from_sql_and_values(
                backend,
                super::sqlite::FULL_TEXT,
                [
                    matched.join(" OR ").into(),
                    scope.knowledge_space_id.into(),
                    limit.into(),
                    scope.tenant_id.into(),
                    scope.knowledge_space_id.into(),
                    scope.documents.map_or(sea_orm::Value::String(None), super::sqlite::id_list),
                ],
            )
        }
    };
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
    if dialect(conn) == Dialect::Sqlite || searched.len() <= 1 || limit == 0 {
        let mut found = Vec::with_capacity(queries.len());
        for terms in queries {
            found.push(full_text(conn, scope, terms, limit).await?);
        }
        return Ok(found);
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let words: Vec<String> = searched.iter().map(|terms| terms.join(" or ")).collect();
    let words = serde_json::to_string(&words).map_err(|error| DbErr::Custom(error.to_string()))?;
    let statement = Statement::from_sql_and_values(
        conn.get_database_backend(),
        super::postgres::FULL_TEXT_FOR_QUERIES,
        [
            scope.tenant_id.into(),
            scope.knowledge_space_id.into(),
            words.into(),
            limit.into(),
            postgres_documents(scope),
        ],
    );
    let mut lists: Vec<Vec<PassageRow>> = searched.iter().map(|_| Vec::new()).collect();
    for result in conn.query_all_raw(statement).await? {
        let n: i64 = result.try_get("", "n")?;
        let list = usize::try_from(n - 1).ok().and_then(|index| lists.get_mut(index));
        let list =
            list.ok_or_else(|| DbErr::Custom(format!("full-text search answered query {n} of {}", searched.len())))?;
        list.push(PassageRow::from_query_result(&result, "")?);
    }
    // Back in the order asked, with nothing for the queries that had no terms.
    let mut lists = lists.into_iter();
    Ok(queries
        .iter()
        .map(|terms| if terms.is_empty() { Vec::new() } else { lists.next().unwrap_or_default() })
        .collect())
}

/// The scope's documents as PostgreSQL's `uuid[]` parameter (NULL for every document).
fn postgres_documents(scope: Scope<'_>) -> sea_orm::Value {
    match scope.documents {
        Some(ids) => ids.to_vec().into(),
        None => sea_orm::Value::Array(sea_orm::sea_query::ArrayType::Uuid, None),
    }
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
    let (sql, ids) = match dialect(conn) {
        Dialect::Postgres => (super::postgres::PASSAGES_BY_IDS, ids.to_vec().into()),
        Dialect::Sqlite => (super::sqlite::PASSAGES_BY_IDS, super::sqlite::id_list(ids)),
    };
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
