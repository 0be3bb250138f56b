//! Permission snapshots, and the grant rule: whether a snapshot still holds, and if not
//! why, written once per backend as SQL (`postgres/sql/grant_denial.sql`,
//! `sqlite/sql/grant_denial.sql`) and used by every statement that asks (these verdicts,
//! the fenced stage boundary, the batched claim, the task reads), so the rule has no twin.
use std::collections::HashMap;

use entity::GrantDenial;
use sea_orm::{ConnectionTrait, DbErr, Statement};
use uuid::Uuid;

use super::backend::{Backend, on_backend};

/// Writes a permission snapshot as given (the constraint suite's way past the grant rules).
#[cfg(feature = "testing")]
pub async fn insert_snapshot<C: ConnectionTrait>(
    conn: &C,
    row: entity::permission_snapshot::Model,
) -> Result<entity::permission_snapshot::Model, DbErr> {
    use entity::permission_snapshot as snapshot;
    use sea_orm::{ActiveModelTrait as _, EntityTrait as _, IntoActiveModel as _};
    snapshot::Entity::insert(row.into_active_model().reset_all()).exec_with_returning(conn).await
}

/// Whether each snapshot of `ids` holds at `now`: `None` when it does, else why not (an
/// unknown id is `Missing`). One statement however many there are.
pub async fn verdicts<C: ConnectionTrait>(
    conn: &C,
    ids: &[Uuid],
    now: i64,
) -> Result<HashMap<Uuid, Option<GrantDenial>>, DbErr> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let backend = conn.get_database_backend();
    let (sql, ids_value) = on_backend!(conn, |B| (B::STATEMENTS.grant_verdicts, B::id_list(ids)));
    let statement = Statement::from_sql_and_values(backend, sql, [ids_value, now.into()]);
    let mut verdicts: HashMap<Uuid, Option<GrantDenial>> =
        ids.iter().map(|id| (*id, Some(GrantDenial::Missing))).collect();
    for row in conn.query_all_raw(statement).await? {
        let id: Uuid = row.try_get("", "snapshot_id")?;
        let denial: Option<String> = row.try_get("", "denial")?;
        verdicts.insert(id, denial.as_deref().map(GrantDenial::from_label));
    }
    Ok(verdicts)
}

/// The one snapshot's verdict ([`verdicts`] of one).
pub async fn verdict<C: ConnectionTrait>(conn: &C, id: Uuid, now: i64) -> Result<Option<GrantDenial>, DbErr> {
    Ok(verdicts(conn, &[id], now).await?.remove(&id).unwrap_or(Some(GrantDenial::Missing)))
}
