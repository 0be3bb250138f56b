//! Hybrid retrieval for one query: full-text search always; with an embeddings endpoint,
//! vector search too, fused by reciprocal rank. When the endpoint cannot embed the query
//! (down, slow, malformed), retrieval carries on with full text alone.
use std::time::Duration;

use sea_orm::{DatabaseConnection, DbErr};

use super::embeddings::Embedder;
use super::search::{self, Found, Scope};
use crate::model_settings::EmbeddingSettings;

/// Retrieves a space's passages for research.
#[derive(Debug, Clone, Default)]
pub struct Retriever {
    /// The query embedder, when embeddings are configured.
    embedder: Option<Embedder>,
    /// The most stored vectors one search compares.
    max_compared: u64,
    /// The similarity the support check's meaning fallback needs.
    support_threshold: f64,
}

impl Retriever {
    /// Full-text search only.
    pub fn full_text() -> Self {
        Self::default()
    }

    /// What the settings configure: hybrid when an endpoint is set. Query embeddings get
    /// `query_timeout_ms`, so a slow endpoint delays retrieval by at most that.
    pub fn from_settings(settings: &EmbeddingSettings) -> Result<Self, String> {
        let Some(endpoint) = settings.endpoint()? else {
            return Ok(Self::full_text());
        };
        let embedder = Embedder::new(endpoint, Duration::from_millis(settings.query_timeout_ms.max(1)))
            .map_err(|error| format!("building the embeddings client: {error}"))?;
        Ok(Self {
            embedder: Some(embedder),
            max_compared: settings.max_passages_per_space,
            support_threshold: settings.support_threshold,
        })
    }

    /// The similarity at which the support check accepts a claim by meaning, when
    /// embeddings are configured.
    pub fn support_threshold(&self) -> Option<f64> {
        self.embedder.as_ref().map(|_| self.support_threshold)
    }

    /// The embeddings of `texts`, in order, in one request (within the query timeout).
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        let Some(embedder) = &self.embedder else {
            return Err("no embeddings endpoint is configured".to_owned());
        };
        embedder.embed(texts).await.map_err(|error| error.to_string())
    }

    /// Whether vectors take part.
    pub fn is_hybrid(&self) -> bool {
        self.embedder.is_some()
    }

    /// The best `limit` passages for `query` in the scope, best first.
    pub async fn search(
        &self,
        db: &DatabaseConnection,
        scope: Scope<'_>,
        query: &str,
        limit: u64,
    ) -> Result<Vec<Found>, DbErr> {
        Ok(self.search_many(db, scope, &[query.to_owned()], limit).await?.pop().unwrap_or_default())
    }

    /// [`Retriever::search`] for each of `queries`, in order; their full-text searches go
    /// to the database together.
    pub async fn search_many(
        &self,
        db: &DatabaseConnection,
        scope: Scope<'_>,
        queries: &[String],
        limit: u64,
    ) -> Result<Vec<Vec<Found>>, DbErr> {
        let terms: Vec<Vec<String>> = queries.iter().map(|query| search::search_terms(query)).collect();
        let texts = search::full_text_for_queries(db, scope, &terms, limit).await?;
        let Some(embedder) = &self.embedder else {
            return Ok(texts);
        };
        let mut found = Vec::with_capacity(queries.len());
        for (query, text) in queries.iter().zip(texts) {
            let query_vector = match embedder.embed(std::slice::from_ref(query)).await {
                Ok(mut vectors) => vectors.pop().unwrap_or_default(),
                Err(error) => {
                    tracing::warn!(error = %error, "embedding the query failed; retrieving by full text alone");
                    found.push(text);
                    continue;
                }
            };
            let similar = search::vector(db, scope, embedder.model(), &query_vector, limit, self.max_compared).await?;
            let mut fused = search::fuse(vec![text, similar]);
            fused.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            found.push(fused);
        }
        Ok(found)
    }
}
