//! Our tables before the seed (members, API keys, snapshots) check what they hold the same
//! way the seed does: roles, channels and revisions are closed sets and positive.
use anyhow::Context as _;
use entity::{AccessChannel, MemberRole};
use kfs_tests::{DbTest, TestDb, Violation, db_tests, fixtures};
use sea_orm::{ActiveEnum, Iterable};

use super::{accepted, set};

/// The tests of the tables before the seed.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        member_role_check_accepts_every_role_and_rejects_any_other,
        member_and_api_key_revisions_must_be_positive,
        snapshot_channel_and_revision_checks_reject_bad_values,
    ]
}

async fn member_role_check_accepts_every_role_and_rejects_any_other(db: TestDb) -> anyhow::Result<()> {
    let member = fixtures::task(&db).await?.member.id;
    for role in MemberRole::iter() {
        let value = role.to_value();
        accepted(set(&db, "knowledge_space_members", member, &[("role", value.clone().into())]).await, &value)?;
    }
    for role in ["admin", "OWNER", ""] {
        let result = set(&db, "knowledge_space_members", member, &[("role", role.into())]).await;
        db.assert_violates(result, Violation::Check("knowledge_space_members_role_ck")).await.context(role)?;
    }
    Ok(())
}

async fn member_and_api_key_revisions_must_be_positive(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let result = set(&db, "knowledge_space_members", task.member.id, &[("revision", 0.into())]).await;
    db.assert_violates(result, Violation::Check("knowledge_space_members_revision_ck")).await?;
    let key = fixtures::api_key(&db, &task.space).await?;
    let result = set(&db, "knowledge_space_api_keys", key.id, &[("revision", 0.into())]).await;
    db.assert_violates(result, Violation::Check("knowledge_space_api_keys_revision_ck")).await
}

async fn snapshot_channel_and_revision_checks_reject_bad_values(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let snapshot = fixtures::snapshot(&db, &task.member, AccessChannel::Agent).await?.id;
    let table = "knowledge_space_permission_snapshots";
    let result = set(&db, table, snapshot, &[("access_channel", "email".into())]).await;
    db.assert_violates(result, Violation::Check("knowledge_space_permission_snapshots_channel_ck")).await?;
    let result = set(&db, table, snapshot, &[("revision", 0.into())]).await;
    db.assert_violates(result, Violation::Check("knowledge_space_permission_snapshots_revision_ck")).await
}
