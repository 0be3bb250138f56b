//! An identity provider for the tests: an HTTP server publishing a JWKS (scriptable: which
//! keys, or an outage that answers 503 or never answers) and counting its fetches, and the
//! private keys to sign its tokens with (`fixtures/jwks`, test-only keys). Its issuer is
//! its own base URL, as a real provider's is.
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The provider's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestKey {
    /// RS256, the key before a rotation.
    RsaA,
    /// RS256, the key after it.
    RsaB,
    /// ES256 (P-256).
    Ec,
    /// EdDSA (Ed25519).
    Ed,
}

impl TestKey {
    /// The `kid` it is published under.
    pub fn kid(self) -> &'static str {
        match self {
            Self::RsaA => "rsa-a",
            Self::RsaB => "rsa-b",
            Self::Ec => "ec-p256",
            Self::Ed => "ed25519",
        }
    }

    /// The algorithm it signs with.
    pub fn algorithm(self) -> Algorithm {
        match self {
            Self::RsaA | Self::RsaB => Algorithm::RS256,
            Self::Ec => Algorithm::ES256,
            Self::Ed => Algorithm::EdDSA,
        }
    }

    fn encoding_key(self) -> anyhow::Result<EncodingKey> {
        Ok(match self {
            Self::RsaA => EncodingKey::from_rsa_pem(include_bytes!("../fixtures/jwks/rsa-a.pem"))?,
            Self::RsaB => EncodingKey::from_rsa_pem(include_bytes!("../fixtures/jwks/rsa-b.pem"))?,
            Self::Ec => EncodingKey::from_ec_pem(include_bytes!("../fixtures/jwks/ec-p256.pem"))?,
            Self::Ed => EncodingKey::from_ed_pem(include_bytes!("../fixtures/jwks/ed25519.pem"))?,
        })
    }

    /// Its public half as a JWK with `kid`, `alg` and `use`.
    pub fn jwk(self) -> anyhow::Result<Value> {
        if self == Self::Ed {
            // jsonwebtoken cannot derive an OKP JWK; the fixture holds the public key.
            let x = include_str!("../fixtures/jwks/ed25519.x").trim();
            return Ok(
                json!({ "kty": "OKP", "crv": "Ed25519", "x": x, "kid": self.kid(), "alg": "EdDSA", "use": "sig" }),
            );
        }
        let mut jwk = Jwk::from_encoding_key(&self.encoding_key()?, self.algorithm())?;
        jwk.common.key_id = Some(self.kid().to_owned());
        let mut value = serde_json::to_value(jwk)?;
        value["use"] = json!("sig");
        Ok(value)
    }

    /// A token with these claims, signed by this key, its header naming `kid`.
    pub fn sign(self, claims: &Value) -> anyhow::Result<String> {
        self.sign_as(self.kid(), claims)
    }

    /// As [`sign`](Self::sign), but the header names `kid` (a key the set may not have).
    pub fn sign_as(self, kid: &str, claims: &Value) -> anyhow::Result<String> {
        let mut header = Header::new(self.algorithm());
        header.kid = Some(kid.to_owned());
        Ok(jsonwebtoken::encode(&header, claims, &self.encoding_key()?)?)
    }
}

/// The RSA key's public half as PEM, what an algorithm-confusion attack signs HS256 with.
pub const RSA_A_PUBLIC_PEM: &[u8] = include_bytes!("../fixtures/jwks/rsa-a.pub.pem");

/// How the provider misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Answers this status to every fetch.
    Status(u16),
    /// Accepts the connection and never answers.
    Hang,
}

#[derive(Default)]
struct Provider {
    published: Vec<Value>,
    outage: Option<Outage>,
    fetches: usize,
}

/// A running provider; dropping it stops the server.
pub struct JwksServer {
    addr: SocketAddr,
    provider: Arc<Mutex<Provider>>,
    server: JoinHandle<()>,
}

impl JwksServer {
    /// Listens on a free port of 127.0.0.1, publishing `keys`.
    pub async fn start(keys: &[TestKey]) -> anyhow::Result<Self> {
        let provider = Arc::new(Mutex::new(Provider::default()));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new().route("/.well-known/jwks.json", get(jwks)).with_state(provider.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let started = Self { addr, provider, server };
        started.publish(keys)?;
        Ok(started)
    }

    /// Its `iss`: the base URL with a trailing slash.
    pub fn issuer(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Where its keys are published.
    pub fn jwks_url(&self) -> String {
        format!("http://{}/.well-known/jwks.json", self.addr)
    }

    /// From now on the set holds exactly `keys` (a rotation publishes the new one).
    pub fn publish(&self, keys: &[TestKey]) -> anyhow::Result<()> {
        let published = keys.iter().map(|key| key.jwk()).collect::<anyhow::Result<Vec<_>>>()?;
        self.with(|provider| provider.published = published);
        Ok(())
    }

    /// Starts (`Some`) or ends (`None`) an outage.
    pub fn outage(&self, outage: Option<Outage>) {
        self.with(|provider| provider.outage = outage);
    }

    /// How many times the set was asked for.
    pub fn fetches(&self) -> usize {
        self.with(|provider| provider.fetches)
    }

    /// Claims a frontend's token carries: this issuer, audience `kfs`, valid for ten
    /// minutes, for `subject` in `tenant`.
    pub fn claims(&self, subject: &str, tenant: &str) -> Value {
        let now = chrono::Utc::now().timestamp();
        json!({ "iss": self.issuer(), "aud": "kfs", "sub": subject, "tenant": tenant, "iat": now, "exp": now + 600 })
    }

    fn with<T>(&self, change: impl FnOnce(&mut Provider) -> T) -> T {
        let mut provider = self.provider.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        change(&mut provider)
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn jwks(State(provider): State<Arc<Mutex<Provider>>>) -> Response {
    let (outage, published) = {
        let mut provider = provider.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        provider.fetches += 1;
        (provider.outage, provider.published.clone())
    };
    match outage {
        Some(Outage::Status(status)) => {
            StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE).into_response()
        }
        Some(Outage::Hang) => std::future::pending().await,
        None => axum::Json(json!({ "keys": published })).into_response(),
    }
}
