//! `knowledge_space_members`: who may use a space. Every change bumps the revision, and a
//! removal keeps the row, so a grant issued before a change never comes back to life.
use entity::{MemberRole, member, now_millis};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    PaginatorTrait, QueryFilter, QueryOrder,
};
use uuid::Uuid;

/// The membership row of `subject_id` in the space, removed or not.
pub async fn find_any<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    subject_id: &str,
) -> Result<Option<member::Model>, DbErr> {
    member::Entity::find()
        .filter(member::Column::TenantId.eq(tenant_id))
        .filter(member::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .filter(member::Column::SubjectId.eq(subject_id))
        .one(conn)
        .await
}

/// The membership of `subject_id` in the space, if it is current (not removed).
pub async fn find_active<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    subject_id: &str,
) -> Result<Option<member::Model>, DbErr> {
    let found = find_any(conn, tenant_id, knowledge_space_id, subject_id).await?;
    Ok(found.filter(|membership| membership.removed_at.is_none()))
}

/// Makes `subject_id` a member with `role`: inserts at revision 1, or reuses the existing
/// row (re-adding a removed member, or changing a role) with the next revision.
pub async fn upsert<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    subject_id: &str,
    role: MemberRole,
) -> Result<member::Model, DbErr> {
    let now = now_millis();
    if let Some(existing) = find_any(conn, tenant_id, knowledge_space_id, subject_id).await? {
        if existing.removed_at.is_none() && existing.role == role {
            return Ok(existing);
        }
        let revision = existing.revision + 1;
        let mut row = existing.into_active_model();
        row.role = Set(role);
        row.revision = Set(revision);
        row.removed_at = Set(None);
        row.updated_at = Set(now);
        return row.update(conn).await;
    }
    let row = member::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(tenant_id.to_owned()),
        knowledge_space_id: Set(knowledge_space_id),
        subject_id: Set(subject_id.to_owned()),
        role: Set(role),
        revision: Set(1),
        removed_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    };
    member::Entity::insert(row).exec_with_returning(conn).await
}

/// Marks the membership removed and bumps its revision, which kills its grants.
pub async fn remove<C: ConnectionTrait>(conn: &C, membership: member::Model) -> Result<member::Model, DbErr> {
    let now = now_millis();
    let revision = membership.revision + 1;
    let mut row = membership.into_active_model();
    row.revision = Set(revision);
    row.removed_at = Set(Some(now));
    row.updated_at = Set(now);
    row.update(conn).await
}

/// The current members of a space, oldest first.
pub async fn list_active<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
) -> Result<Vec<member::Model>, DbErr> {
    member::Entity::find()
        .filter(member::Column::TenantId.eq(tenant_id))
        .filter(member::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .filter(member::Column::RemovedAt.is_null())
        .order_by_asc(member::Column::CreatedAt)
        .order_by_asc(member::Column::Id)
        .all(conn)
        .await
}

/// How many current owners the space has; a space must keep at least one.
pub async fn count_owners<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
) -> Result<u64, DbErr> {
    member::Entity::find()
        .filter(member::Column::TenantId.eq(tenant_id))
        .filter(member::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .filter(member::Column::RemovedAt.is_null())
        .filter(member::Column::Role.eq(MemberRole::Owner))
        .count(conn)
        .await
}
