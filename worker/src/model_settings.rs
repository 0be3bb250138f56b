//! The model endpoints research and knowledge call (chat completions, embeddings,
//! reranking) and the built-in engine's prices, as configured (`KFS_ENGINE`,
//! `KFS_OPENAI_*`, `KFS_EMBEDDINGS_*`, `KFS_RERANK_*`). A leaf: the modules that call the
//! endpoints name these types, and `config` gathers them into the worker's settings.
use secrecy::SecretString;
use serde::Deserialize;

/// Which engine runs the stages (`KFS_ENGINE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// No model: planning by splitting, extractive answers.
    #[default]
    Builtin,
    /// An OpenAI-compatible chat-completions endpoint (`KFS_OPENAI_*`).
    Openai,
}

/// An OpenAI-compatible chat-completions endpoint (`POST {base_url}/chat/completions`:
/// OpenAI, Ollama, vLLM, llama.cpp server, LiteLLM…), used when `KFS_ENGINE=openai`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct OpenAiSettings {
    /// `KFS_OPENAI_BASE_URL`, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: Option<String>,
    /// `KFS_OPENAI_API_KEY`: sent as a bearer token; never logged, returned or quoted.
    pub api_key: Option<SecretString>,
    /// `KFS_OPENAI_MODEL`: the model of every mode without its own.
    pub model: Option<String>,
    /// `KFS_OPENAI_MODEL_AUTO`: for tasks that ask for mode `AUTO` (before the mode is
    /// resolved by the question's length).
    pub model_auto: Option<String>,
    /// `KFS_OPENAI_MODEL_FAST`.
    pub model_fast: Option<String>,
    /// `KFS_OPENAI_MODEL_RESEARCH`.
    pub model_research: Option<String>,
    /// `KFS_OPENAI_MODEL_DEEP`.
    pub model_deep: Option<String>,
    /// `KFS_OPENAI_TIMEOUT_MS`: how long one request may take, stream included.
    pub timeout_ms: u64,
    /// `KFS_OPENAI_MAX_OUTPUT_TOKENS`: the most tokens one call may write (`max_tokens`).
    pub max_output_tokens: u32,
    /// `KFS_OPENAI_INPUT_USD_PER_1M`: dollars per million prompt tokens (0 for a local
    /// server); required, so a budget is never checked against a price nobody set.
    pub input_usd_per_1m: Option<f64>,
    /// `KFS_OPENAI_OUTPUT_USD_PER_1M`: dollars per million completion tokens; required.
    pub output_usd_per_1m: Option<f64>,
    /// `KFS_OPENAI_MAX_RETRIES`: retries of one call after a transient failure (429, 5xx,
    /// a timeout, a dropped connection) before the attempt fails.
    pub max_retries: u32,
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        Self {
            base_url: None,
            api_key: None,
            model: None,
            model_auto: None,
            model_fast: None,
            model_research: None,
            model_deep: None,
            timeout_ms: 120_000,
            max_output_tokens: 1_024,
            input_usd_per_1m: None,
            output_usd_per_1m: None,
            max_retries: 3,
        }
    }
}

/// A checked chat endpoint: everything the `openai` engine needs, validated at start.
#[derive(Debug, Clone)]
pub struct ChatEndpoint {
    /// The base URL, without a trailing slash.
    pub base_url: String,
    /// The bearer token, if the endpoint wants one.
    pub api_key: Option<SecretString>,
    /// The model of modes without their own.
    pub model: String,
    /// Per-mode models: auto (as asked), fast, research, deep.
    pub mode_models: [Option<String>; 4],
    /// One request's time limit.
    pub timeout: std::time::Duration,
    /// `max_tokens` of every call.
    pub max_output_tokens: u32,
    /// Dollars per million prompt tokens.
    pub input_usd_per_1m: f64,
    /// Dollars per million completion tokens.
    pub output_usd_per_1m: f64,
    /// Retries of one call.
    pub max_retries: u32,
}

impl OpenAiSettings {
    /// The endpoint, or every reason the settings are incomplete or wrong.
    pub fn endpoint(&self) -> Result<ChatEndpoint, String> {
        fn present(value: &Option<String>) -> Option<&str> {
            value.as_deref().map(str::trim).filter(|value| !value.is_empty())
        }
        let mut problems = Vec::new();
        let base_url = present(&self.base_url).map(|url| url.trim_end_matches('/').to_owned());
        match &base_url {
            None => problems.push("KFS_OPENAI_BASE_URL is not set".to_owned()),
            Some(url)
                if !(url.starts_with("http://") || url.starts_with("https://"))
                    || reqwest::Url::parse(url).is_err() =>
            {
                problems.push(format!("KFS_OPENAI_BASE_URL must be an http:// or https:// URL (got {url:?})"));
            }
            Some(_) => {}
        }
        let model = present(&self.model);
        if model.is_none() {
            problems.push("KFS_OPENAI_MODEL is not set".to_owned());
        }
        let price = |value: Option<f64>, name: &str, problems: &mut Vec<String>| match value {
            Some(price) if price.is_finite() && price >= 0.0 => price,
            Some(_) => {
                problems.push(format!("{name} must be a price of zero or more"));
                0.0
            }
            None => {
                problems.push(format!("{name} is not set (dollars per million tokens; 0 for a local server)"));
                0.0
            }
        };
        let input_usd_per_1m = price(self.input_usd_per_1m, "KFS_OPENAI_INPUT_USD_PER_1M", &mut problems);
        let output_usd_per_1m = price(self.output_usd_per_1m, "KFS_OPENAI_OUTPUT_USD_PER_1M", &mut problems);
        if self.timeout_ms == 0 {
            problems.push("KFS_OPENAI_TIMEOUT_MS must be more than 0".to_owned());
        }
        if self.max_output_tokens == 0 {
            problems.push("KFS_OPENAI_MAX_OUTPUT_TOKENS must be more than 0".to_owned());
        }
        if !problems.is_empty() {
            return Err(format!("KFS_ENGINE=openai needs a complete configuration: {}", problems.join("; ")));
        }
        Ok(ChatEndpoint {
            base_url: base_url.unwrap_or_default(),
            api_key: self.api_key.clone(),
            model: model.unwrap_or_default().to_owned(),
            mode_models: [
                present(&self.model_auto).map(str::to_owned),
                present(&self.model_fast).map(str::to_owned),
                present(&self.model_research).map(str::to_owned),
                present(&self.model_deep).map(str::to_owned),
            ],
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            max_output_tokens: self.max_output_tokens,
            input_usd_per_1m,
            output_usd_per_1m,
            max_retries: self.max_retries,
        })
    }
}

/// The cosine similarity at which the answer check supports a sentence by meaning, unless
/// `KFS_EMBEDDINGS_SUPPORT_THRESHOLD` says otherwise (`research::support::similar`).
pub const DEFAULT_SUPPORT_THRESHOLD: f64 = 0.75;

/// An OpenAI-compatible embeddings endpoint (`POST {base_url}/embeddings`: OpenAI, Ollama,
/// vLLM, llama.cpp server, text-embeddings-inference). Off unless `base_url` and `model`
/// are both set.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct EmbeddingSettings {
    /// `KFS_EMBEDDINGS_BASE_URL`, e.g. `https://api.openai.com/v1`.
    pub base_url: Option<String>,
    /// `KFS_EMBEDDINGS_MODEL`, e.g. `text-embedding-3-small`.
    pub model: Option<String>,
    /// `KFS_EMBEDDINGS_API_KEY`: sent as a bearer token; never logged.
    pub api_key: Option<SecretString>,
    /// `KFS_EMBEDDINGS_BATCH_SIZE`: passages per request.
    pub batch_size: usize,
    /// `KFS_EMBEDDINGS_TIMEOUT_MS`: how long one backlog request may take.
    pub timeout_ms: u64,
    /// `KFS_EMBEDDINGS_QUERY_TIMEOUT_MS`: how long embedding a research query may take
    /// before retrieval goes on with full text alone.
    pub query_timeout_ms: u64,
    /// `KFS_EMBEDDINGS_MAX_ATTEMPTS`: attempts of one document before it is `failed`.
    pub max_attempts: i32,
    /// `KFS_EMBEDDINGS_MAX_PASSAGES_PER_SPACE`: the most vectors one search compares
    /// (scoring is in Rust: this bounds its time and memory per space).
    pub max_passages_per_space: u64,
    /// `KFS_EMBEDDINGS_SUPPORT_THRESHOLD`: the cosine similarity at which an answer's
    /// sentence with too few of its passage's words is still supported by meaning
    /// (`research::support::similar`), between 0 and 1.
    pub support_threshold: f64,
}

impl Default for EmbeddingSettings {
    fn default() -> Self {
        Self {
            base_url: None,
            model: None,
            api_key: None,
            batch_size: 64,
            timeout_ms: 30_000,
            query_timeout_ms: 5_000,
            max_attempts: 12,
            max_passages_per_space: 20_000,
            support_threshold: DEFAULT_SUPPORT_THRESHOLD,
        }
    }
}

/// A reranking endpoint speaking the common `POST {base}/rerank` format (Cohere, Jina,
/// Voyage, Hugging Face TEI, Infinity, vLLM).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RerankSettings {
    /// `KFS_RERANK_BASE_URL`, e.g. `https://api.cohere.com/v2` or `http://127.0.0.1:7997`.
    pub base_url: Option<String>,
    /// `KFS_RERANK_MODEL`, e.g. `rerank-v3.5` or `BAAI/bge-reranker-base`.
    pub model: Option<String>,
    /// `KFS_RERANK_API_KEY`: sent as a bearer token; never logged.
    pub api_key: Option<SecretString>,
    /// `KFS_RERANK_USD_PER_1K_SEARCHES`: what 1,000 rerank requests cost (0 for a local
    /// server); each request is charged to the task and must fit in its budget.
    pub usd_per_1k_searches: f64,
    /// `KFS_RERANK_TIMEOUT_MS`: how long one request may take.
    pub timeout_ms: u64,
    /// `KFS_RERANK_MAX_RETRIES`: retries of one request after a transient failure (429,
    /// 5xx, a timeout) before retrieval goes on in fused order.
    pub max_retries: u32,
}

impl Default for RerankSettings {
    fn default() -> Self {
        Self { base_url: None, model: None, api_key: None, usd_per_1k_searches: 0.0, timeout_ms: 5_000, max_retries: 2 }
    }
}

impl RerankSettings {
    /// The endpoint, `None` when reranking is off, or why the settings are incomplete.
    pub fn endpoint(&self) -> Result<Option<ModelEndpoint>, String> {
        if !self.usd_per_1k_searches.is_finite() || self.usd_per_1k_searches < 0.0 {
            return Err("KFS_RERANK_USD_PER_1K_SEARCHES must be a price of 0 or more".to_owned());
        }
        ModelEndpoint::from_parts("KFS_RERANK", &self.base_url, &self.model, &self.api_key)
    }
}

/// An endpoint serving a model (embeddings or reranking), when configured.
#[derive(Debug, Clone)]
pub struct ModelEndpoint {
    /// The base URL, without a trailing slash.
    pub base_url: String,
    /// The model name, stored with every vector.
    pub model: String,
    /// The bearer token, if the endpoint wants one.
    pub api_key: Option<SecretString>,
}

impl ModelEndpoint {
    /// The endpoint `<prefix>_BASE_URL` and `<prefix>_MODEL` configure: `None` when neither
    /// is set, an error naming the missing one when only one is.
    fn from_parts(
        prefix: &str,
        base_url: &Option<String>,
        model: &Option<String>,
        api_key: &Option<SecretString>,
    ) -> Result<Option<Self>, String> {
        fn set(value: &Option<String>) -> Option<&str> {
            value.as_deref().map(str::trim).filter(|value| !value.is_empty())
        }
        match (set(base_url), set(model)) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(format!("{prefix}_BASE_URL is set but {prefix}_MODEL is not")),
            (None, Some(_)) => Err(format!("{prefix}_MODEL is set but {prefix}_BASE_URL is not")),
            (Some(base_url), Some(model)) => Ok(Some(Self {
                base_url: base_url.trim_end_matches('/').to_owned(),
                model: model.to_owned(),
                api_key: api_key.clone(),
            })),
        }
    }
}

impl EmbeddingSettings {
    /// The endpoint, `None` when embeddings are off, or why the settings are incomplete.
    pub fn endpoint(&self) -> Result<Option<ModelEndpoint>, String> {
        if !(0.0..=1.0).contains(&self.support_threshold) {
            return Err("KFS_EMBEDDINGS_SUPPORT_THRESHOLD must be a similarity between 0 and 1".to_owned());
        }
        ModelEndpoint::from_parts("KFS_EMBEDDINGS", &self.base_url, &self.model, &self.api_key)
    }
}

/// Which engine runs, and the prices and defaults of the built-in one.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct EngineSettings {
    /// `KFS_ENGINE`: `builtin` (the default) or `openai`.
    pub kind: EngineKind,
    /// US dollars per 1,000 input tokens.
    pub input_usd_per_1k_tokens: f64,
    /// US dollars per 1,000 output tokens.
    pub output_usd_per_1k_tokens: f64,
    /// Evidence kept when a task names no `top_k`.
    pub default_top_k: usize,
    /// Candidates fetched per sub-query from each ranker.
    pub candidates_per_sub_query: u64,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            kind: EngineKind::Builtin,
            input_usd_per_1k_tokens: 0.0005,
            output_usd_per_1k_tokens: 0.0015,
            default_top_k: 5,
            candidates_per_sub_query: 20,
        }
    }
}
