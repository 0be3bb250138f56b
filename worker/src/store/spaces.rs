//! `knowledge_spaces`: creating a space with its first owner, and reading the spaces a
//! subject belongs to.
use entity::{MemberRole, knowledge_space as space, member, now_millis};
use sea_orm::sea_query::Query;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::members;
use super::pages::{PageKey, before};

/// Inserts the space and makes `owner` its owner. Call inside one write transaction so a
/// space never exists without an owner.
pub async fn create<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    name: &str,
    owner: &str,
) -> Result<(space::Model, member::Model), DbErr> {
    let now = now_millis();
    let row = space::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(tenant_id.to_owned()),
        name: Set(name.to_owned()),
        created_at: Set(now),
        updated_at: Set(now),
    };
    let created = space::Entity::insert(row).exec_with_returning(conn).await?;
    let membership = members::upsert(conn, tenant_id, created.id, owner, MemberRole::Owner).await?;
    Ok((created, membership))
}

/// The space with this id in this tenant.
pub async fn find<C: ConnectionTrait>(conn: &C, tenant_id: &str, id: Uuid) -> Result<Option<space::Model>, DbErr> {
    space::Entity::find_by_id(id).filter(space::Column::TenantId.eq(tenant_id)).one(conn).await
}

/// One page of the spaces `subject_id` is a (not removed) member of, newest first.
pub async fn page_for_member<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    after: Option<PageKey>,
    limit: u64,
) -> Result<Vec<space::Model>, DbErr> {
    let memberships = Query::select()
        .column(member::Column::KnowledgeSpaceId)
        .from(member::Entity)
        .and_where(member::Column::TenantId.eq(tenant_id))
        .and_where(member::Column::SubjectId.eq(subject_id))
        .and_where(member::Column::RemovedAt.is_null())
        .to_owned();
    let mut query = space::Entity::find()
        .filter(space::Column::TenantId.eq(tenant_id))
        .filter(space::Column::Id.in_subquery(memberships));
    if let Some(key) = after {
        query = query.filter(before(space::Column::CreatedAt, space::Column::Id, key));
    }
    query.order_by_desc(space::Column::CreatedAt).order_by_desc(space::Column::Id).limit(limit).all(conn).await
}
