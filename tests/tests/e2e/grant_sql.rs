//! The grant rule exists twice: `worker::grant::check_many` (the worker, at every stage
//! boundary, where `check` falls back to it to name a denial) and `worker::grant::holds_sql` (reads that fetch a row and its grant's
//! validity in one statement). This holds them to the same verdict for every way a grant
//! lives or dies, on both databases.
use chrono::{DateTime, Utc};
use entity::{AccessChannel, MemberRole, api_key, member, permission_snapshot as snapshot};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ActiveValue::Set, EntityTrait, QueryFilter};

pub fn tests() -> Vec<DbTest> {
    db_tests![grant_sql_agrees_with_check]
}

/// A snapshot of `key` at `revision`, with the key's expiry as the snapshot records it.
fn key_snapshot(key: &api_key::Model, revision: i32, expires_at: Option<i64>) -> snapshot::ActiveModel {
    snapshot::ActiveModel {
        id: Set(uuid::Uuid::now_v7()),
        tenant_id: Set(key.tenant_id.clone()),
        knowledge_space_id: Set(key.knowledge_space_id),
        subject_id: Set(key.subject_id()),
        access_channel: Set(AccessChannel::ServiceApi),
        revision: Set(revision),
        permissions: Set(serde_json::json!(["research.run", "research.read"])),
        issued_at: Set(entity::now_millis()),
        api_key_id: Set(Some(key.id)),
        api_key_revision: Set(Some(revision)),
        api_key_expires_at: Set(expires_at
            .and_then(DateTime::<Utc>::from_timestamp_millis)
            .map(|at| at.fixed_offset())),
    }
}

async fn grant_sql_agrees_with_check(db: TestDb) -> anyhow::Result<()> {
    let now = entity::now_millis();
    let space = fixtures::space(&db).await?;
    let current = fixtures::member(&db, &space, "current", MemberRole::Editor).await?;
    let removed = fixtures::member(&db, &space, "removed", MemberRole::Editor).await?;
    let changed = fixtures::member(&db, &space, "changed", MemberRole::Viewer).await?;
    let mut cases: Vec<(&str, snapshot::ActiveModel, bool)> = vec![
        ("a current member", fixtures::snapshot_row(&current, AccessChannel::Interactive), true),
        ("a removed member", fixtures::snapshot_row(&removed, AccessChannel::Interactive), false),
        ("a member whose role changed", fixtures::snapshot_row(&changed, AccessChannel::Mcp), false),
    ];
    member::Entity::update(member::ActiveModel {
        id: Set(removed.id),
        removed_at: Set(Some(now)),
        ..Default::default()
    })
    .exec(&db.db)
    .await?;
    member::Entity::update(member::ActiveModel { id: Set(changed.id), revision: Set(2), ..Default::default() })
        .exec(&db.db)
        .await?;
    let key = |expires_at: Option<i64>, revoked: bool, revision: i32| {
        let db = &db;
        let space = &space;
        async move {
            let key = fixtures::api_key(db, space).await?;
            let changes = api_key::ActiveModel {
                id: Set(key.id),
                expires_at: Set(expires_at),
                revoked_at: Set(revoked.then_some(now)),
                revision: Set(revision),
                ..Default::default()
            };
            anyhow::Ok(api_key::Entity::update(changes).exec(&db.db).await?)
        }
    };
    let live = key(Some(now + 3_600_000), false, 1).await?;
    let no_expiry = key(None, false, 1).await?;
    let revoked = key(None, true, 1).await?;
    let rotated = key(None, false, 2).await?;
    let expired = key(Some(now - 1_000), false, 1).await?;
    cases.extend([
        ("a live key", key_snapshot(&live, 1, live.expires_at), true),
        ("a key without expiry", key_snapshot(&no_expiry, 1, None), true),
        ("a revoked key", key_snapshot(&revoked, 1, None), false),
        ("a rotated key", key_snapshot(&rotated, 1, None), false),
        ("an expired key", key_snapshot(&expired, 1, expired.expires_at), false),
        // Only the snapshot's copy of the expiry has passed: still denied.
        ("a snapshot past its recorded expiry", key_snapshot(&no_expiry, 1, Some(now - 1_000)), false),
        ("a snapshot before its recorded expiry", key_snapshot(&no_expiry, 1, Some(now + 60_000)), true),
    ]);
    let backend = db.db.get_database_backend();
    for (what, row, expected) in cases {
        let inserted = snapshot::Entity::insert(row).exec_with_returning(&db.db).await?;
        let verdicts = worker::grant::check_many(&db.db, &[inserted.id], now).await?;
        let checked = verdicts.get(&inserted.id).is_some_and(|verdict| verdict.holds());
        // `check` (one statement when the grant holds) must answer the same.
        ensure_eq!(worker::grant::check(&db.db, inserted.id, now).await?.holds(), expected, "{what}: check");
        let in_sql = snapshot::Entity::find_by_id(inserted.id)
            .filter(worker::grant::holds_sql(backend, "\"knowledge_space_permission_snapshots\".\"id\"", now))
            .one(&db.db)
            .await?
            .is_some();
        ensure_eq!((checked, in_sql), (expected, expected), "{what}: check and SQL disagree with the rule");
    }
    Ok(())
}
