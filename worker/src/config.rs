//! The worker's settings: one typed struct, loaded once by the binary (or embedded in the
//! API's settings under a `worker` key) and passed explicitly. Both binaries read the same
//! environment spellings ([`environment`]).
use figment::Figment;
use figment::providers::Env;
use serde::Deserialize;

pub use crate::knowledge::chunk::ChunkSettings;
pub use crate::model_settings::{
    ChatEndpoint, EmbeddingSettings, EngineKind, EngineSettings, ModelEndpoint, OpenAiSettings, RerankSettings,
};

/// The environment variables every binary reads into its settings, over what the TOML file
/// said: `KFS_WORKER_<FIELD>` into `[worker]`, `KFS_CHUNK_<FIELD>` into `[worker.chunk]`,
/// `KFS_EMBEDDINGS_<FIELD>` into `[worker.embeddings]`, `KFS_RERANK_<FIELD>` into
/// `[worker.rerank]`, `KFS_EXTRACT_<FIELD>` into `[worker.extract]`, `KFS_ENGINE` into
/// `[worker.engine] kind`, `KFS_OPENAI_<FIELD>` into `[worker.openai]`, and `DATABASE_URL`.
pub fn environment(figment: Figment) -> Figment {
    figment
        .merge(Env::prefixed("KFS_WORKER_").map(|key| format!("worker.{key}").into()))
        .merge(Env::prefixed("KFS_CHUNK_").map(|key| format!("worker.chunk.{key}").into()))
        .merge(Env::prefixed("KFS_EMBEDDINGS_").map(|key| format!("worker.embeddings.{key}").into()))
        .merge(Env::prefixed("KFS_RERANK_").map(|key| format!("worker.rerank.{key}").into()))
        .merge(Env::raw().only(&["KFS_ENGINE"]).map(|_| "worker.engine.kind".into()))
        .merge(Env::prefixed("KFS_OPENAI_").map(|key| format!("worker.openai.{key}").into()))
        .merge(Env::prefixed("KFS_WEBHOOK_").map(|key| format!("worker.webhooks.{key}").into()))
        .merge(Env::prefixed("KFS_EXTRACT_").map(|key| format!("worker.extract.{key}").into()))
        .merge(
            Env::raw()
                .only(&[
                    "KFS_MAX_RUNNING_PER_TENANT",
                    "KFS_MAX_RUNNING_PER_SPACE",
                    "KFS_RETENTION_DAYS",
                    "KFS_RETENTION_ANSWER_TRACES",
                    "KFS_MAX_EXTRACTED_BYTES",
                    "KFS_THREAD_MAX_TURNS",
                    "KFS_THREAD_CONTEXT_CHARS",
                ])
                .map(|key| format!("worker.{}", key.as_str().to_ascii_lowercase().trim_start_matches("kfs_")).into()),
        )
        .merge(Env::raw().only(&["DATABASE_URL"]))
}

/// Everything the lease loop, the outbox loop and the built-in engine may be tuned by.
/// Every field has a default, so an empty `[worker]` section is a valid configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct WorkerSettings {
    /// Names this worker in `worker_id` / `locked_by`; defaults to `hostname-pid-uuid` so two
    /// processes on one host never share it.
    pub worker_id: String,
    /// How long a claim lasts without a heartbeat, in milliseconds.
    pub lease_ms: i64,
    /// How often a running stage extends its lease, in milliseconds; well under `lease_ms`.
    pub heartbeat_ms: u64,
    /// The safety-net poll of both loops, in milliseconds: correctness never depends on a
    /// wake-up arriving.
    pub poll_interval_ms: u64,
    /// How many jobs (or outbox rows) one loop step claims at most.
    pub batch_size: u64,
    /// How many jobs this worker runs at once. The default (256) suits engines that wait
    /// on a model: a waiting stage holds no database connection, only its lease (renewed
    /// with all the others in one statement per beat) and a few KiB of memory. The
    /// built-in engine gains nothing past about 64, where the database is the bound.
    pub max_concurrency: usize,
    /// First retry delay after a failed attempt, in milliseconds; doubles per attempt.
    pub retry_base_ms: i64,
    /// The longest retry delay, in milliseconds.
    pub retry_cap_ms: i64,
    /// Publish attempts of one outbox row before it is dead-lettered.
    pub outbox_max_attempts: i32,
    /// How long an outbox loop holds a row it is publishing, in milliseconds.
    pub outbox_lock_ms: i64,
    /// Claims a task may use before it fails; the API stamps it on new tasks.
    pub default_max_execution_attempts: i32,
    /// How long a graceful shutdown waits for running stages to reach a checkpoint, in
    /// milliseconds, before their leases are released.
    pub shutdown_grace_ms: u64,
    /// Whether to LISTEN on PostgreSQL for wake-ups from other processes (ignored on SQLite).
    pub pg_listen: bool,
    /// What the built-in engine charges, and its defaults.
    pub engine: EngineSettings,
    /// How documents are split into passages (`KFS_CHUNK_*`).
    pub chunk: ChunkSettings,
    /// The embeddings endpoint, if any (`KFS_EMBEDDINGS_*`).
    pub embeddings: EmbeddingSettings,
    /// The reranking endpoint, if any (`KFS_RERANK_*`).
    pub rerank: RerankSettings,
    /// The chat endpoint of the `openai` engine (`KFS_OPENAI_*`).
    pub openai: OpenAiSettings,
    /// `KFS_WORKER_HTTP_ADDR`: where the `worker` binary serves `/healthz`, `/readyz` and
    /// `/metrics`; unset (the default), it serves nothing.
    pub http_addr: Option<std::net::SocketAddr>,
    /// Webhook deliveries (`KFS_WEBHOOK_*`).
    pub webhooks: crate::webhooks::WebhookSettings,
    /// `KFS_RETENTION_DAYS`: finished tasks not updated for this many days are deleted
    /// with their events, results, outbox rows and deliveries; unset (the default), none.
    pub retention_days: Option<u32>,
    /// `KFS_RETENTION_ANSWER_TRACES`: prune the answer traces of those tasks too (by
    /// default they are kept, unlinked from the deleted task).
    pub retention_answer_traces: bool,
    /// How often the retention pass runs, in milliseconds.
    pub retention_interval_ms: u64,
    /// `KFS_MAX_RUNNING_PER_TENANT`: the most tasks of one tenant running at once, across
    /// workers (unlimited when unset); a task over it stays queued.
    pub max_running_per_tenant: Option<u32>,
    /// `KFS_MAX_RUNNING_PER_SPACE`: the same per knowledge space.
    pub max_running_per_space: Option<u32>,
    /// The least time between two writes of a task's answer draft while a model streams
    /// it, in milliseconds: what `researchTaskAnswer` subscribers in other processes wait
    /// at most for the next words (this process's hear them as soon as they are written).
    pub answer_draft_ms: u64,
    /// How uploaded files are read (`KFS_EXTRACT_*`).
    pub extract: crate::knowledge::extract::ExtractSettings,
    /// `KFS_MAX_EXTRACTED_BYTES`: the most text (UTF-8 bytes) one uploaded file may give.
    pub max_extracted_bytes: usize,
    /// `KFS_THREAD_MAX_TURNS`: the most turns one research thread holds.
    pub thread_max_turns: u64,
    /// `KFS_THREAD_CONTEXT_CHARS`: how much of a thread's earlier turns a follow-up sees,
    /// in characters (newest first, question and answer while they fit, then questions).
    pub thread_context_chars: usize,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            worker_id: default_worker_id(),
            lease_ms: 30_000,
            heartbeat_ms: 10_000,
            poll_interval_ms: 2_000,
            batch_size: 32,
            max_concurrency: 256,
            retry_base_ms: 1_000,
            retry_cap_ms: 60_000,
            outbox_max_attempts: 10,
            outbox_lock_ms: 30_000,
            default_max_execution_attempts: 3,
            shutdown_grace_ms: 10_000,
            pg_listen: true,
            engine: EngineSettings::default(),
            chunk: ChunkSettings::default(),
            embeddings: EmbeddingSettings::default(),
            rerank: RerankSettings::default(),
            openai: OpenAiSettings::default(),
            answer_draft_ms: 100,
            max_running_per_tenant: None,
            max_running_per_space: None,
            http_addr: None,
            webhooks: crate::webhooks::WebhookSettings::default(),
            retention_days: None,
            retention_answer_traces: false,
            retention_interval_ms: 60_000,
            extract: crate::knowledge::extract::ExtractSettings::default(),
            max_extracted_bytes: 20 << 20,
            thread_max_turns: 500,
            thread_context_chars: 8_000,
        }
    }
}

impl WorkerSettings {
    /// The running-task caps.
    pub fn caps(&self) -> crate::lifecycle::Caps {
        crate::lifecycle::Caps { per_tenant: self.max_running_per_tenant, per_space: self.max_running_per_space }
    }

    /// The retry policy of failed attempts.
    pub fn retry_policy(&self) -> crate::retry::RetryPolicy {
        crate::retry::RetryPolicy { base_ms: self.retry_base_ms, cap_ms: self.retry_cap_ms }
    }
}

/// `hostname-pid-uuid`: readable in logs, unique across restarts and processes.
pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let unique = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &unique[..8])
}

#[cfg(test)]
mod tests {
    use super::RerankSettings;
    use crate::model_settings::EmbeddingSettings;

    #[test]
    fn the_support_threshold_is_a_similarity() {
        let set = EmbeddingSettings {
            base_url: Some("http://127.0.0.1:11434/v1".to_owned()),
            model: Some("nomic-embed-text".to_owned()),
            ..EmbeddingSettings::default()
        };
        assert!(set.endpoint().is_ok_and(|endpoint| endpoint.is_some()));
        for wrong in [-0.1, 1.5, f64::NAN] {
            let wrong = EmbeddingSettings { support_threshold: wrong, ..set.clone() };
            assert!(wrong.endpoint().is_err_and(|error| error.contains("KFS_EMBEDDINGS_SUPPORT_THRESHOLD")));
        }
    }

    #[test]
    fn reranking_is_off_unless_both_address_and_model_are_set_and_its_price_is_a_price() {
        assert!(matches!(RerankSettings::default().endpoint(), Ok(None)));
        let half = RerankSettings { base_url: Some("http://127.0.0.1:7997/".to_owned()), ..RerankSettings::default() };
        assert!(half.endpoint().is_err_and(|error| error.contains("KFS_RERANK_MODEL")));
        let whole = RerankSettings { model: Some("bge-reranker-base".to_owned()), ..half };
        let endpoint = whole.endpoint().expect("complete").expect("on");
        assert_eq!(endpoint.base_url, "http://127.0.0.1:7997");
        let negative = RerankSettings { usd_per_1k_searches: -1.0, ..whole };
        assert!(negative.endpoint().is_err_and(|error| error.contains("KFS_RERANK_USD_PER_1K_SEARCHES")));
    }
}
