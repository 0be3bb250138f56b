//! Column and constraint shapes the earlier tables share, so every table spells a tenant,
//! a time or a JSON document the same way on both backends.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

/// An identifier from a plain name.
pub fn name(value: &str) -> Alias {
    Alias::new(value)
}

/// `id UUID PRIMARY KEY NOT NULL`.
pub fn uuid_pk() -> ColumnDef {
    ColumnDef::new(name("id")).uuid().not_null().primary_key().to_owned()
}

/// A NOT NULL UUID column.
pub fn uuid(column: &str) -> ColumnDef {
    ColumnDef::new(name(column)).uuid().not_null().to_owned()
}

/// A NOT NULL VARCHAR(len) column.
pub fn varchar(column: &str, len: u32) -> ColumnDef {
    ColumnDef::new(name(column)).string_len(len).not_null().to_owned()
}

/// A NOT NULL TEXT column.
pub fn text(column: &str) -> ColumnDef {
    ColumnDef::new(name(column)).text().not_null().to_owned()
}

/// A NOT NULL INTEGER column.
pub fn integer(column: &str) -> ColumnDef {
    ColumnDef::new(name(column)).integer().not_null().to_owned()
}

/// A NOT NULL BIGINT of epoch milliseconds.
pub fn millis(column: &str) -> ColumnDef {
    ColumnDef::new(name(column)).big_integer().not_null().to_owned()
}

/// A nullable BIGINT of epoch milliseconds.
pub fn millis_null(column: &str) -> ColumnDef {
    ColumnDef::new(name(column)).big_integer().null().to_owned()
}

/// A NOT NULL JSON document: JSONB on PostgreSQL, text checked by `json_valid` on SQLite.
pub fn json(backend: DatabaseBackend, column: &str) -> ColumnDef {
    let mut def = ColumnDef::new(name(column)).json_binary().not_null().to_owned();
    if backend == DatabaseBackend::Sqlite {
        def.check(Expr::cust(format!("json_valid(\"{column}\")")));
    }
    def
}

/// `FOREIGN KEY (tenant_id, knowledge_space_id) REFERENCES knowledge_spaces ON DELETE CASCADE`.
pub fn space_fk(table: &str) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(format!("{table}_space_fk"))
        .from(name(table), (name("tenant_id"), name("knowledge_space_id")))
        .to(name("knowledge_spaces"), (name("tenant_id"), name("id")))
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

/// A named CHECK constraint.
pub fn check(constraint: &str, condition: &str) -> (Alias, Expr) {
    (name(constraint), Expr::cust(condition.to_owned()))
}

/// `CREATE [UNIQUE] INDEX IF NOT EXISTS name ON table (columns)`.
pub fn index(index: &str, table: &str, columns: &[&str], unique: bool) -> IndexCreateStatement {
    let mut statement = Index::create();
    statement.name(index).table(name(table)).if_not_exists();
    for column in columns {
        statement.col(name(column));
    }
    if unique {
        statement.unique();
    }
    statement.to_owned()
}

/// The SQL list of the access channels the seed allows.
pub const CHANNELS: &str = "('interactive', 'service_api', 'mcp', 'agent')";
