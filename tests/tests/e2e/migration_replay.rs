//! Migrations are safe to replay. The seed's own comment names the case: the runner may
//! die between running a migration and recording it, and the next start runs it again.
//! Replaying must succeed and leave the schema (and the data) exactly as it was; a seed
//! half-applied by another runner must end in the same schema as a clean migration.
use anyhow::{Context as _, ensure};
use kfs_tests::{DbTest, TestDb, db_tests, fixtures, schema};
use migration::{Migrator, MigratorTrait as _};
use sea_orm::{ConnectionTrait as _, Value};

/// The replay tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        replaying_the_seed_after_it_was_applied_but_not_recorded_changes_nothing,
        replaying_the_answer_trace_link_after_it_was_applied_but_not_recorded_changes_nothing,
        replaying_every_migration_after_none_was_recorded_changes_nothing;
        postgres_only: a_seed_half_applied_by_another_runner_migrates_to_the_clean_schema,
        processes_starting_together_on_a_fresh_database_migrate_it_once,
    ]
}

const SEED: &str = "m0015_research_task_jobs";
const TASK_LINK: &str = "m0016_answer_trace_task_link";

/// The seed exactly as migration 0015 runs it on PostgreSQL.
const SEED_SQL: &str = include_str!("../../../migration/src/sql/0015_research_task_jobs.postgres.sql");

fn migration_names() -> Vec<String> {
    Migrator::migrations().iter().map(|migration| migration.name().to_owned()).collect()
}

/// Forgets that `versions` ran, runs the migrator again, and checks that the schema, the
/// fixture task and the record of applied migrations are back as they were.
async fn replay_unrecorded(db: &TestDb, versions: &[&str]) -> anyhow::Result<()> {
    let task = fixtures::task(db).await?;
    let before = schema::dump(db).await?;
    for version in versions {
        let deleted = db.exec("DELETE FROM seaql_migrations WHERE version = $1", [Value::from(*version)]).await?;
        ensure!(deleted.rows_affected() == 1, "{version} was not recorded as applied");
    }
    Migrator::up(&db.db, None).await.context("replaying")?;
    schema::assert_same(&before, &schema::dump(db).await?)?;
    ensure!(db.count_where("research_task_jobs", "id", task.job.id).await? == 1, "the replay lost the task");
    let grant = task.job.permission_snapshot_id;
    ensure!(
        db.count_where("knowledge_space_permission_snapshots", "id", grant).await? == 1,
        "the replay lost the grant"
    );
    let recorded = db.strings("SELECT version FROM seaql_migrations ORDER BY version", []).await?;
    ensure!(recorded == migration_names(), "recorded after the replay: {recorded:?}");
    Ok(())
}

async fn replaying_the_seed_after_it_was_applied_but_not_recorded_changes_nothing(db: TestDb) -> anyhow::Result<()> {
    replay_unrecorded(&db, &[SEED]).await
}

async fn replaying_the_answer_trace_link_after_it_was_applied_but_not_recorded_changes_nothing(
    db: TestDb,
) -> anyhow::Result<()> {
    replay_unrecorded(&db, &[TASK_LINK]).await
}

async fn replaying_every_migration_after_none_was_recorded_changes_nothing(db: TestDb) -> anyhow::Result<()> {
    let names = migration_names();
    let versions: Vec<&str> = names.iter().map(String::as_str).collect();
    replay_unrecorded(&db, &versions).await
}

/// Another runner (the platform's own, which records in `schema_migrations`) got part of
/// the way through the seed: cut it before each `DO` block in turn, run that much by hand,
/// then migrate. Each cut must end in the schema of a clean migration.
async fn a_seed_half_applied_by_another_runner_migrates_to_the_clean_schema(db: TestDb) -> anyhow::Result<()> {
    let clean = schema::dump(&db).await?;
    let before_seed = migration_names().iter().position(|name| name == SEED).context("no seed migration")?;
    let before_seed = u32::try_from(before_seed)?;
    let cuts: Vec<usize> = SEED_SQL.match_indices("\nDO $").map(|(at, _)| at).collect();
    ensure!(cuts.len() == 4, "expected the seed's four DO blocks, found {}", cuts.len());
    for (block, cut) in cuts.into_iter().enumerate() {
        let what = format!("seed cut before DO block {}", block + 1);
        let half = db.empty_sibling().await?;
        Migrator::up(&half.db, Some(before_seed)).await.context("migrating up to the seed")?;
        half.db
            .execute_unprepared(&SEED_SQL[..cut])
            .await
            .with_context(|| format!("{what}: running the first part"))?;
        Migrator::up(&half.db, None).await.with_context(|| format!("{what}: migrating"))?;
        schema::assert_same(&clean, &schema::dump(&half).await?).context(what)?;
    }
    Ok(())
}

/// Every replica migrates on start. Three `api` processes started at once on a fresh
/// PostgreSQL database take turns (an advisory lock): all three start, and each
/// migration is recorded once.
async fn processes_starting_together_on_a_fresh_database_migrate_it_once(db: TestDb) -> anyhow::Result<()> {
    use kfs_tests::process::{ApiProcess, Binaries, api_command};
    let fresh = db.empty_sibling().await?;
    let binaries = Binaries::build().await?;
    let start = || ApiProcess::start(api_command(&binaries.api, &fresh.url));
    let (one, two, three) = tokio::join!(start(), start(), start());
    let _servers = [one.context("the first api")?, two.context("the second api")?, three.context("the third api")?];
    let recorded = fresh.strings("SELECT version FROM seaql_migrations ORDER BY version", []).await?;
    ensure!(recorded == migration_names(), "recorded {recorded:?}, expected each of {:?} once", migration_names());
    Ok(())
}
