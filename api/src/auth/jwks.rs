//! One identity provider's signing keys, fetched from its JWKS URL and cached. A token
//! naming a key the cache lacks (the provider rotated) makes the set be fetched again, at
//! most once per `refresh_interval`, so a stream of made-up `kid`s costs the provider one
//! request a minute, not one per token. A set older than `max_age` is refreshed in the
//! background while it keeps serving, and keeps serving while the provider is down. With
//! no set at all (a cold start during an outage) tokens are refused at once after one
//! fetch's timeout, and for a few seconds after a failure without asking again: a clear
//! UNAUTHENTICATED, never a request hanging on the provider.
use std::str::FromStr as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use crate::error::ApiError;

/// The largest JWKS document read (real ones are a few kilobytes).
const MAX_JWKS_BYTES: usize = 256 * 1024;

/// The most keys of one set tried for a token that names none.
const MAX_UNNAMED_CANDIDATES: usize = 8;

/// After a failed fetch, how long a cold cache refuses without asking the provider again.
const FAILURE_BACKOFF: Duration = Duration::from_secs(5);

/// How JWKS are fetched and kept.
#[derive(Debug, Clone)]
pub struct JwksSettings {
    /// One fetch's time limit.
    pub timeout: Duration,
    /// The least time between two fetches caused by unknown `kid`s.
    pub refresh_interval: Duration,
    /// How old a set may grow before it is refreshed on use.
    pub max_age: Duration,
}

impl Default for JwksSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3),
            refresh_interval: Duration::from_secs(60),
            max_age: Duration::from_secs(600),
        }
    }
}

/// One verification key of the set.
struct Key {
    kid: Option<String>,
    algorithm: Option<Algorithm>,
    key: DecodingKey,
}

/// A fetched set.
struct KeySet {
    keys: Vec<Key>,
    fetched_at: Instant,
}

#[derive(Default)]
struct FetchState {
    last_unknown_kid_refresh: Option<Instant>,
    last_failure: Option<Instant>,
}

/// Why a fetch is wanted; each has its own throttle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// Nothing is cached yet.
    Cold,
    /// A token names a key the set lacks.
    UnknownKid,
    /// The set is older than `max_age`.
    Stale,
}

struct Inner {
    issuer: String,
    url: String,
    client: reqwest::Client,
    settings: JwksSettings,
    current: RwLock<Option<Arc<KeySet>>>,
    fetching: tokio::sync::Mutex<FetchState>,
    /// Whether a background refresh of a stale set is under way.
    refreshing: AtomicBool,
}

/// The cached keys of one issuer.
pub struct JwksCache {
    inner: Arc<Inner>,
}

impl JwksCache {
    /// A cache for `url`, empty until a token needs it.
    pub fn new(issuer: &str, url: &str, settings: JwksSettings) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()?;
        let inner = Inner {
            issuer: issuer.to_owned(),
            url: url.to_owned(),
            client,
            settings,
            current: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(FetchState::default()),
            refreshing: AtomicBool::new(false),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The keys a token with header `kid` and `alg` may be verified with: the one named
    /// `kid` (fetching the set again if it is unknown and the throttle allows), or with no
    /// `kid`, the set's keys for `alg`. Empty means refused.
    pub async fn keys_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Vec<DecodingKey>, ApiError> {
        let inner = &self.inner;
        let set = match inner.cached() {
            Some(set) => set,
            None => inner.fetch(Reason::Cold).await.ok_or(ApiError::Unauthenticated)?,
        };
        // One background refresh at a time, not one spawned task per request while it runs.
        if set.fetched_at.elapsed() > inner.settings.max_age && !inner.refreshing.swap(true, Ordering::AcqRel) {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                inner.fetch(Reason::Stale).await;
                inner.refreshing.store(false, Ordering::Release);
            });
        }
        let found = candidates(&set, kid, alg);
        // Only a kid the set lacks altogether is news of a rotation; a known kid under
        // another algorithm is just a bad token.
        let known = |kid: &str| set.keys.iter().any(|key| key.kid.as_deref() == Some(kid));
        if !found.is_empty() || kid.is_none_or(known) {
            return Ok(found);
        }
        match inner.fetch(Reason::UnknownKid).await {
            Some(fresh) => Ok(candidates(&fresh, kid, alg)),
            None => Ok(Vec::new()),
        }
    }
}

impl Inner {
    fn cached(&self) -> Option<Arc<KeySet>> {
        self.current.read().ok().and_then(|current| current.clone())
    }

    /// Fetches the set unless `reason`'s throttle says no, or another caller fetched it
    /// while this one waited; returns the set now cached (`None` if there is none new).
    async fn fetch(&self, reason: Reason) -> Option<Arc<KeySet>> {
        let asked = Instant::now();
        let mut state = match reason {
            // A background refresh never queues behind another fetch.
            Reason::Stale => self.fetching.try_lock().ok()?,
            Reason::Cold | Reason::UnknownKid => self.fetching.lock().await,
        };
        if let Some(set) = self.cached().filter(|set| set.fetched_at >= asked) {
            return Some(set);
        }
        let now = Instant::now();
        let recently = |at: Option<Instant>, within: Duration| at.is_some_and(|at| now.duration_since(at) < within);
        match reason {
            Reason::Cold | Reason::Stale if recently(state.last_failure, FAILURE_BACKOFF) => return None,
            Reason::UnknownKid if recently(state.last_unknown_kid_refresh, self.settings.refresh_interval) => {
                tracing::debug!(issuer = %self.issuer, "unknown kid: the JWKS was refreshed recently; not again yet");
                return None;
            }
            Reason::UnknownKid => state.last_unknown_kid_refresh = Some(now),
            Reason::Cold | Reason::Stale => {}
        }
        match self.download().await {
            Ok(keys) => {
                tracing::info!(issuer = %self.issuer, keys = keys.len(), reason = ?reason, "JWKS fetched");
                let set = Arc::new(KeySet { keys, fetched_at: Instant::now() });
                if let Ok(mut current) = self.current.write() {
                    *current = Some(set.clone());
                }
                state.last_failure = None;
                Some(set)
            }
            Err(error) => {
                tracing::warn!(issuer = %self.issuer, url = %self.url, error = %error, "fetching the JWKS failed");
                state.last_failure = Some(Instant::now());
                None
            }
        }
    }

    async fn download(&self) -> anyhow::Result<Vec<Key>> {
        let mut response = self.client.get(&self.url).header("accept", "application/json").send().await?;
        anyhow::ensure!(response.status().is_success(), "the provider answered {}", response.status());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            anyhow::ensure!(
                body.len() + chunk.len() <= MAX_JWKS_BYTES,
                "the JWKS is larger than {MAX_JWKS_BYTES} bytes"
            );
            body.extend_from_slice(&chunk);
        }
        let document: Value = serde_json::from_slice(&body)?;
        let listed =
            document.get("keys").and_then(Value::as_array).ok_or_else(|| anyhow::anyhow!("no `keys` array"))?;
        Ok(listed.iter().filter_map(verification_key).collect())
    }
}

/// A JWK usable to verify signatures, or `None` for anything else: symmetric keys (a JWKS
/// must never supply an HMAC secret), encryption keys, unknown algorithms or key types.
fn verification_key(value: &Value) -> Option<Key> {
    let jwk: Jwk = serde_json::from_value(value.clone()).ok()?;
    if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
        return None;
    }
    if jwk.common.public_key_use.as_ref().is_some_and(|usage| *usage != PublicKeyUse::Signature) {
        return None;
    }
    let algorithm = match &jwk.common.key_algorithm {
        None => None,
        Some(declared) => Some(Algorithm::from_str(&declared.to_string()).ok()?),
    };
    if algorithm.is_some_and(|algorithm| matches!(algorithm, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)) {
        return None;
    }
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(Key { kid: jwk.common.key_id, algorithm, key })
}

fn candidates(set: &KeySet, kid: Option<&str>, alg: Algorithm) -> Vec<DecodingKey> {
    let fits = |key: &&Key| key.algorithm.is_none_or(|declared| declared == alg);
    match kid {
        Some(kid) => set
            .keys
            .iter()
            .filter(|key| key.kid.as_deref() == Some(kid))
            .filter(fits)
            .map(|key| key.key.clone())
            .collect(),
        None => set.keys.iter().filter(fits).take(MAX_UNNAMED_CANDIDATES).map(|key| key.key.clone()).collect(),
    }
}
