//! The checked-in `schema.graphql` is what the code serves: frontends generate their
//! clients from it, so a drift must fail the build's tests, not surprise a client.
use anyhow::ensure;
use kfs_tests::{PlainTest, plain_tests};

pub fn tests() -> Vec<PlainTest> {
    plain_tests![the_checked_in_schema_matches_the_code]
}

async fn the_checked_in_schema_matches_the_code() -> anyhow::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schema.graphql");
    let generated = api::graphql::sdl_without_state();
    if std::env::var_os("KFS_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated)?;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    ensure!(
        committed == generated,
        "schema.graphql differs from the schema the code builds; regenerate it with\n  \
         KFS_UPDATE_SCHEMA=1 cargo test -p workspace-tests --test e2e -- api_schema\nand review the diff"
    );
    Ok(())
}
