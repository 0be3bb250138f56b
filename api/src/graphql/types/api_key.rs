//! `ApiKey` and `CreatedApiKey`. The secret's hash is never exposed; the secret itself
//! exists only in the `CreatedApiKey` that minted or rotated it.
use async_graphql::{Object, SimpleObject};
use chrono::{DateTime, Utc};
use entity::api_key;
use uuid::Uuid;

use super::datetime;
use worker::app::key_secret::format_key;

/// A service credential bound to one knowledge space.
pub struct ApiKey(pub api_key::Model);

/// A service credential bound to one knowledge space.
#[Object]
impl ApiKey {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// The one space the key may act in.
    async fn knowledge_space_id(&self) -> Uuid {
        self.0.knowledge_space_id
    }
    /// Bumped on every rotation; grants issued at an older revision no longer hold.
    async fn revision(&self) -> i32 {
        self.0.revision
    }
    /// The subject id the key acts as, stable across rotations.
    async fn subject_id(&self) -> String {
        self.0.subject_id()
    }
    async fn expires_at(&self) -> Option<DateTime<Utc>> {
        self.0.expires_at.map(datetime)
    }
    async fn revoked_at(&self) -> Option<DateTime<Utc>> {
        self.0.revoked_at.map(datetime)
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
}

/// A key together with its secret, returned once when the key is created or rotated.
#[derive(SimpleObject)]
pub struct CreatedApiKey {
    /// The key.
    pub api_key: ApiKey,
    /// The full key to present as `Authorization: Bearer <secret>`. Shown only now.
    pub secret: String,
}

impl CreatedApiKey {
    /// Pairs a key with its freshly minted secret, in the presented format.
    pub fn new(key: api_key::Model, secret: &str) -> Self {
        let presented = format_key(key.id, secret);
        Self { api_key: ApiKey(key), secret: presented }
    }
}
