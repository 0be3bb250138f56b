//! The seed's grant bindings: a permission snapshot issued from an API key records the
//! key's id and revision (and the key must exist in the same space), and an answer trace
//! is either legacy (unbound) or bound to a snapshot of its own subject and channel.
//!
//! The seed's binding checks end in comparisons that are NULL, not false, when their
//! column is NULL (`"api_key_revision" >= 1`, `"access_channel" IN (…)`), and a CHECK
//! passes on NULL: a key without a revision, or a trace with a snapshot but no revision
//! or channel, is accepted by the schema. The lifecycle never writes such rows; these
//! tests assert what the seed does guarantee.
use anyhow::Context as _;
use chrono::{DateTime, FixedOffset};
use entity::{AccessChannel, answer_trace, permission_snapshot};
use kfs_tests::{DbTest, TestDb, Violation, db_tests, fixtures};
use sea_orm::{ActiveValue::Set, EntityTrait};

use super::{delete, set};

/// The snapshot and answer-trace binding tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        snapshot_api_key_binding_check_rejects_a_key_without_a_valid_revision,
        snapshot_api_key_binding_check_rejects_key_details_without_a_key,
        snapshot_api_key_must_belong_to_the_snapshots_space,
        deleting_an_api_key_that_a_snapshot_records_is_restricted,
        answer_trace_binding_check_rejects_a_partial_binding,
        answer_trace_binding_check_rejects_an_unknown_channel,
        answer_trace_binding_check_accepts_legacy_and_fully_bound_traces,
        answer_trace_must_cite_a_snapshot_of_its_own_subject_and_channel,
        deleting_a_snapshot_that_an_answer_trace_cites_is_restricted,
    ]
}

/// One way to break a valid trace's binding.
type BreakTrace = fn(&mut answer_trace::ActiveModel);

const KEY_BINDING: Violation = Violation::Check("knowledge_space_permission_snapshots_api_key_binding_ck");
const TRACE_BINDING: Violation = Violation::Check("answer_traces_permission_snapshot_binding_ck");
const TRACE_SNAPSHOT_FK: Violation = Violation::ForeignKey(Some("answer_traces_permission_snapshot_fk"));

async fn insert_snapshot(db: &TestDb, row: permission_snapshot::ActiveModel) -> Result<u64, sea_orm::DbErr> {
    permission_snapshot::Entity::insert(row).exec_without_returning(&db.db).await
}

async fn insert_trace(db: &TestDb, row: answer_trace::ActiveModel) -> Result<u64, sea_orm::DbErr> {
    answer_trace::Entity::insert(row).exec_without_returning(&db.db).await
}

fn an_hour_from_now() -> Option<DateTime<FixedOffset>> {
    Some((chrono::Utc::now() + chrono::Duration::hours(1)).fixed_offset())
}

async fn snapshot_api_key_binding_check_rejects_a_key_without_a_valid_revision(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let key = fixtures::api_key(&db, &task.space).await?;
    for revision in [Some(0), Some(-1)] {
        let mut row = fixtures::snapshot_row(&task.member, AccessChannel::ServiceApi);
        row.api_key_id = Set(Some(key.id));
        row.api_key_revision = Set(revision);
        db.assert_violates(insert_snapshot(&db, row).await, KEY_BINDING)
            .await
            .with_context(|| format!("{revision:?}"))?;
    }
    for expires_at in [None, an_hour_from_now()] {
        let mut row = fixtures::snapshot_row(&task.member, AccessChannel::ServiceApi);
        row.api_key_id = Set(Some(key.id));
        row.api_key_revision = Set(Some(key.revision));
        row.api_key_expires_at = Set(expires_at);
        insert_snapshot(&db, row).await.with_context(|| format!("a key at revision 1, expiring {expires_at:?}"))?;
    }
    Ok(())
}

async fn snapshot_api_key_binding_check_rejects_key_details_without_a_key(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let mut row = fixtures::snapshot_row(&task.member, AccessChannel::ServiceApi);
    row.api_key_revision = Set(Some(1));
    db.assert_violates(insert_snapshot(&db, row).await, KEY_BINDING).await.context("a revision")?;
    let mut row = fixtures::snapshot_row(&task.member, AccessChannel::ServiceApi);
    row.api_key_expires_at = Set(an_hour_from_now());
    db.assert_violates(insert_snapshot(&db, row).await, KEY_BINDING).await.context("an expiry")?;
    insert_snapshot(&db, fixtures::snapshot_row(&task.member, AccessChannel::Interactive)).await.context("no key")?;
    Ok(())
}

async fn snapshot_api_key_must_belong_to_the_snapshots_space(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let elsewhere = fixtures::space(&db).await?;
    let foreign_key = fixtures::api_key(&db, &elsewhere).await?;
    let mut row = fixtures::snapshot_row(&task.member, AccessChannel::ServiceApi);
    row.api_key_id = Set(Some(foreign_key.id));
    row.api_key_revision = Set(Some(1));
    let result = insert_snapshot(&db, row).await;
    db.assert_violates(result, Violation::ForeignKey(Some("knowledge_space_permission_snapshots_api_key_fk"))).await
}

/// Revoking a key marks it; deleting the row would erase what a grant was issued from.
async fn deleting_an_api_key_that_a_snapshot_records_is_restricted(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let key = fixtures::api_key(&db, &task.space).await?;
    let mut row = fixtures::snapshot_row(&task.member, AccessChannel::ServiceApi);
    row.api_key_id = Set(Some(key.id));
    row.api_key_revision = Set(Some(key.revision));
    insert_snapshot(&db, row).await?;
    let result = delete(&db, "knowledge_space_api_keys", key.id).await;
    db.assert_violates(result, Violation::ForeignKey(Some("knowledge_space_permission_snapshots_api_key_fk"))).await
}

async fn answer_trace_binding_check_rejects_a_partial_binding(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let snapshot = fixtures::snapshot(&db, &task.member, AccessChannel::Interactive).await?;
    let cases: [(&str, BreakTrace); 4] = [
        ("no subject", |row| row.subject_id = Set(None)),
        ("no snapshot", |row| row.permission_snapshot_id = Set(None)),
        ("revision 0", |row| row.permission_snapshot_revision = Set(Some(0))),
        ("a channel alone", |row| {
            row.permission_snapshot_id = Set(None);
            row.permission_snapshot_revision = Set(None);
        }),
    ];
    for (what, break_it) in cases {
        let mut row = fixtures::answer_trace_row(&snapshot);
        break_it(&mut row);
        db.assert_violates(insert_trace(&db, row).await, TRACE_BINDING).await.context(what)?;
    }
    Ok(())
}

async fn answer_trace_binding_check_rejects_an_unknown_channel(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let snapshot = fixtures::snapshot(&db, &task.member, AccessChannel::Interactive).await?;
    let trace = uuid::Uuid::now_v7();
    let mut row = fixtures::answer_trace_row(&snapshot);
    row.id = Set(trace);
    insert_trace(&db, row).await?;
    let result = set(&db, "answer_traces", trace, &[("access_channel", "email".into())]).await;
    db.assert_violates(result, TRACE_BINDING).await
}

async fn answer_trace_binding_check_accepts_legacy_and_fully_bound_traces(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let snapshot = fixtures::snapshot(&db, &task.member, AccessChannel::Interactive).await?;
    insert_trace(&db, fixtures::answer_trace_row(&snapshot)).await.context("fully bound")?;
    let mut legacy = fixtures::answer_trace_row(&snapshot);
    legacy.subject_id = Set(None);
    legacy.permission_snapshot_id = Set(None);
    legacy.permission_snapshot_revision = Set(None);
    legacy.access_channel = Set(None);
    insert_trace(&db, legacy.clone()).await.context("legacy, no subject")?;
    legacy.id = Set(uuid::Uuid::now_v7());
    legacy.subject_id = Set(Some("owner".to_owned()));
    insert_trace(&db, legacy).await.context("legacy with a subject")?;
    Ok(())
}

/// The foreign key covers (space, snapshot, subject, channel): a trace cannot borrow
/// another subject's grant, or its own grant through another channel.
async fn answer_trace_must_cite_a_snapshot_of_its_own_subject_and_channel(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let snapshot = fixtures::snapshot(&db, &task.member, AccessChannel::Interactive).await?;
    let mut row = fixtures::answer_trace_row(&snapshot);
    row.subject_id = Set(Some("intruder".to_owned()));
    db.assert_violates(insert_trace(&db, row).await, TRACE_SNAPSHOT_FK).await.context("another subject")?;
    let mut row = fixtures::answer_trace_row(&snapshot);
    row.access_channel = Set(Some(AccessChannel::Mcp));
    db.assert_violates(insert_trace(&db, row).await, TRACE_SNAPSHOT_FK).await.context("another channel")?;
    let mut row = fixtures::answer_trace_row(&snapshot);
    row.permission_snapshot_id = Set(Some(uuid::Uuid::new_v4()));
    db.assert_violates(insert_trace(&db, row).await, TRACE_SNAPSHOT_FK).await.context("no such snapshot")
}

async fn deleting_a_snapshot_that_an_answer_trace_cites_is_restricted(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let snapshot = fixtures::snapshot(&db, &task.member, AccessChannel::Interactive).await?;
    insert_trace(&db, fixtures::answer_trace_row(&snapshot)).await?;
    let result = delete(&db, "knowledge_space_permission_snapshots", snapshot.id).await;
    db.assert_violates(result, TRACE_SNAPSHOT_FK).await
}
