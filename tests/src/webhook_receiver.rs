//! A webhook receiver for the tests: an HTTP server that records every request (headers,
//! body, arrival) and answers as the test scripts (a status per request in turn, or a
//! delay past the sender's timeout, or no answer at all), and verifies Standard Webhooks
//! signatures with the `standardwebhooks` crate, as a real receiver would.
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What one request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// This status, at once.
    Status(u16),
    /// This status, after this long (past the sender's timeout, it is a timeout).
    Late(u16, Duration),
    /// Nothing, ever: the request hangs until the sender gives up or dies.
    Hang,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: String,
    /// When it arrived.
    pub at: Instant,
    /// What it was answered with.
    pub answer: Answer,
}

impl Received {
    /// The `webhook-id` header.
    pub fn webhook_id(&self) -> Option<&str> {
        self.headers.get("webhook-id").and_then(|value| value.to_str().ok())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }

    /// Whether the Standard Webhooks signature verifies with `secret` (`whsec_…`).
    pub fn verifies_with(&self, secret: &str) -> bool {
        let Ok(verifier) = standardwebhooks::Webhook::new(secret) else { return false };
        verifier.verify(self.body.as_bytes(), &self.headers).is_ok()
    }
}

#[derive(Default)]
struct Script {
    answers: VecDeque<Answer>,
    received: Vec<Received>,
}

/// The running receiver.
pub struct WebhookReceiver {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    serving: JoinHandle<()>,
}

impl WebhookReceiver {
    /// Starts on a free port of 127.0.0.1, answering 200 unless scripted.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let script: Arc<Mutex<Script>> = Arc::default();
        let app = Router::new().route("/hook", post(receive)).with_state(script.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, script, serving })
    }

    /// Its URL (`http://127.0.0.1:PORT/hook`).
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// The next requests get these answers, in order; then 200.
    pub fn then(&self, answers: impl IntoIterator<Item = Answer>) {
        self.lock().answers.extend(answers);
    }

    /// The requests so far.
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// Waits until `n` requests arrived, or fails after `limit`.
    pub async fn wait_for(&self, n: usize, limit: Duration) -> anyhow::Result<Vec<Received>> {
        let until = Instant::now() + limit;
        loop {
            let received = self.received();
            if received.len() >= n {
                return Ok(received);
            }
            anyhow::ensure!(Instant::now() < until, "{} of {n} webhook requests within {limit:?}", received.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

async fn receive(State(script): State<Arc<Mutex<Script>>>, headers: HeaderMap, body: String) -> StatusCode {
    let answer = {
        let mut script = script.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let answer = script.answers.pop_front().unwrap_or(Answer::Status(200));
        script.received.push(Received { headers, body, at: Instant::now(), answer });
        answer
    };
    let status = match answer {
        Answer::Status(code) => code,
        Answer::Late(code, delay) => {
            tokio::time::sleep(delay).await;
            code
        }
        Answer::Hang => std::future::pending().await,
    };
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}
