//! The grant rule, written once per backend (`store/*/sql/grant_denial.sql`): for every way
//! a grant lives or dies, each backend names the same denial through every statement that
//! includes the rule: the verdicts of snapshots, a task read (`find_readable`, `page`),
//! and a boundary's fence.
use chrono::{DateTime, Utc};
use entity::{AccessChannel, GrantDenial, MemberRole, Stage, api_key, member, permission_snapshot as snapshot};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ActiveValue::Set, EntityTrait};
use uuid::Uuid;
use worker::store;

pub fn tests() -> Vec<DbTest> {
    db_tests![every_statement_names_the_same_denial_for_every_way_a_grant_dies]
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

async fn every_statement_names_the_same_denial_for_every_way_a_grant_dies(db: TestDb) -> anyhow::Result<()> {
    use GrantDenial::*;
    let now = entity::now_millis();
    let space = fixtures::space(&db).await?;
    let current = fixtures::member(&db, &space, "current", MemberRole::Editor).await?;
    let removed = fixtures::member(&db, &space, "removed", MemberRole::Editor).await?;
    let changed = fixtures::member(&db, &space, "changed", MemberRole::Viewer).await?;
    let mut cases: Vec<(&str, snapshot::ActiveModel, Option<GrantDenial>)> = vec![
        ("a current member", fixtures::snapshot_row(&current, AccessChannel::Interactive), None),
        ("a removed member", fixtures::snapshot_row(&removed, AccessChannel::Interactive), Some(MembershipChanged)),
        ("a member whose role changed", fixtures::snapshot_row(&changed, AccessChannel::Mcp), Some(MembershipChanged)),
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
        ("a live key", key_snapshot(&live, 1, live.expires_at), None),
        ("a key without expiry", key_snapshot(&no_expiry, 1, None), None),
        ("a revoked key", key_snapshot(&revoked, 1, None), Some(KeyRevoked)),
        ("a rotated key", key_snapshot(&rotated, 1, None), Some(KeyRotated)),
        ("an expired key", key_snapshot(&expired, 1, expired.expires_at), Some(KeyExpired)),
        // Only the snapshot's copy of the expiry has passed: still denied.
        ("a snapshot past its recorded expiry", key_snapshot(&no_expiry, 1, Some(now - 1_000)), Some(KeyExpired)),
        ("a snapshot before its recorded expiry", key_snapshot(&no_expiry, 1, Some(now + 60_000)), None),
    ]);
    // Each grant carries a task, leased, so the fence and the reads ask about it too.
    let owner = fixtures::task(&db).await?;
    for (what, row, expected) in cases {
        let inserted = snapshot::Entity::insert(row).exec_with_returning(&db.db).await?;
        ensure_eq!(store::grants::verdict(&db.db, inserted.id, now).await?, expected, "{what}: verdict");
        let verdicts = store::grants::verdicts(&db.db, &[inserted.id, Uuid::now_v7()], now).await?;
        ensure_eq!(verdicts.get(&inserted.id).copied().flatten(), expected, "{what}: verdicts");
        anyhow::ensure!(verdicts.values().any(|verdict| *verdict == Some(Missing)), "{what}: an unknown id");

        let task = task_under(&db, &owner.job, &inserted).await?;
        let read = store::tasks::find_readable(&db.db, &task.tenant_id, &task.subject_id, task.id, now).await?;
        ensure_eq!(read.is_some(), expected.is_none(), "{what}: find_readable");
        let page =
            store::tasks::page(&db.db, &task.tenant_id, task.knowledge_space_id, &task.subject_id, None, None, 50, now)
                .await?;
        ensure_eq!(page.iter().any(|row| row.id == task.id), expected.is_none(), "{what}: page");
        let lease = store::tasks::LeasePair { job_id: task.id, token: task.lease_token.unwrap_or_default() };
        let txn = store::begin_write(&db.db).await?;
        let fence = store::tasks::fence(&txn, lease, task.stage, now).await?;
        txn.rollback().await?;
        ensure_eq!(fence, expected.map(store::tasks::Fence::GrantDenied), "{what}: fence");
    }
    Ok(())
}

/// A copy of `template` (a leased task) under the grant `snapshot`, with its own id.
async fn task_under(
    db: &TestDb,
    template: &entity::research_task_job::Model,
    snapshot: &snapshot::Model,
) -> anyhow::Result<entity::research_task_job::Model> {
    let row = entity::research_task_job::Model {
        id: Uuid::now_v7(),
        tenant_id: snapshot.tenant_id.clone(),
        knowledge_space_id: snapshot.knowledge_space_id,
        subject_id: snapshot.subject_id.clone(),
        permission_snapshot_id: snapshot.id,
        permission_snapshot_revision: snapshot.revision,
        access_channel: snapshot.access_channel,
        stage: Stage::Planning,
        worker_id: Some("grants".into()),
        lease_token: Some(Uuid::new_v4()),
        lease_expires_at: Some(entity::now_millis() + 60_000),
        ..template.clone()
    };
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    Ok(entity::research_task_job::Entity::insert(row.into_active_model().reset_all())
        .exec_with_returning(&db.db)
        .await?)
}
