//! The standard sea-orm-migration CLI: `migration -u URL status | up | up -n N | down`.
use sea_orm_migration::prelude::*;

#[tokio::main]
async fn main() {
    cli::run_cli(migration::Migrator).await;
}
