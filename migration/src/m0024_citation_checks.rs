//! The citation checks of an answer: every verdict grounding reached on the answer's
//! sentences (`[{sentence, citation, verdict}]`), shown as `AnswerTrace.citationChecks`.
//! A table of its own rather than a column on `answer_traces`, whose shape is the user's
//! seed; one row per trace, written with it and removed with it (traces from before have
//! none and show `[]`). Safe to replay.
use sea_orm_migration::prelude::*;

use crate::columns::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let checks = "answer_trace_citation_checks";
        let mut trace = ForeignKey::create()
            .name("answer_trace_citation_checks_trace_fk")
            .from(name(checks), name("answer_trace_id"))
            .to(name("answer_traces"), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        manager
            .create_table(
                Table::create()
                    .table(name(checks))
                    .if_not_exists()
                    .col(ColumnDef::new(name("answer_trace_id")).uuid().not_null().primary_key())
                    .col(json(manager.get_database_backend(), "checks"))
                    .col(millis("created_at"))
                    .foreign_key(&mut trace)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(name("answer_trace_citation_checks")).if_exists().to_owned()).await
    }
}
