//! The test runner for `harness = false` binaries: each database test becomes one trial per
//! backend (`<module>::<name>::sqlite`, `<module>::<name>::postgres`), each trial on its own
//! tokio runtime and its own fresh database. PostgreSQL trials are shown as ignored, with a
//! banner, when `KFS_TEST_POSTGRES_URL` is not set, so a skipped backend is never silent.
use std::collections::HashSet;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};

use crate::{Backend, TestConfig, TestDb};

/// What an async test returns, boxed so tests of different bodies fit in one list.
pub type TestFuture = Pin<Box<dyn Future<Output = anyhow::Result<()>>>>;

/// A test taking longer than this has hung (a lost wake-up, a lock never released).
const TEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Threads when the user passed no `--test-threads`: trials mostly wait on databases, so
/// more of them than the machine has cores keeps it busy.
const DEFAULT_TEST_THREADS: usize = 8;

/// A test that needs a database: `async fn name(db: TestDb) -> anyhow::Result<()>`.
/// Build lists of them with [`db_tests!`](crate::db_tests).
#[derive(Debug, Clone)]
pub struct DbTest {
    /// `<module>::<name>`, without the backend.
    pub name: String,
    /// The backends it runs on (both unless the test is about one of them).
    pub backends: &'static [Backend],
    /// The test body.
    pub run: fn(TestDb) -> TestFuture,
    /// Whether it drives a real browser (Chromium): without one it is listed as ignored.
    pub needs_chromium: bool,
    /// Whether it calls a real model endpoint (`KFS_TEST_OPENAI_BASE_URL`): without one it
    /// is listed as ignored.
    pub needs_real_model: bool,
    /// Whether the server it starts reads PDFs (Debian's `pdftotext`): without it the test
    /// is listed as ignored.
    pub needs_pdftotext: bool,
    /// Whether it drives the Python MCP SDK (`pip install -r tests/python/requirements.txt`):
    /// without it the test is listed as ignored.
    pub needs_python_mcp: bool,
}

impl DbTest {
    /// A test named after the module it is defined in (`module_path!()`, without the
    /// crate) and its function name.
    pub fn new(module_path: &str, name: &str, backends: &'static [Backend], run: fn(TestDb) -> TestFuture) -> Self {
        let name = qualified(module_path, name);
        Self {
            name,
            backends,
            run,
            needs_chromium: false,
            needs_real_model: false,
            needs_pdftotext: false,
            needs_python_mcp: false,
        }
    }

    /// The same test, marked as driving Chromium.
    pub fn needing_chromium(self) -> Self {
        Self { needs_chromium: true, ..self }
    }

    /// The same test, marked as reading PDFs with `pdftotext`.
    pub fn needing_pdftotext(self) -> Self {
        Self { needs_pdftotext: true, ..self }
    }

    /// The same test, marked as driving the Python MCP SDK.
    pub fn needing_python_mcp(self) -> Self {
        Self { needs_python_mcp: true, ..self }
    }

    /// The same test, marked as calling the real model endpoint [`real_model`] names.
    pub fn needing_real_model(self) -> Self {
        Self { needs_real_model: true, ..self }
    }
}

/// A real OpenAI-compatible endpoint to smoke-test against: `KFS_TEST_OPENAI_BASE_URL`, with
/// `KFS_TEST_OPENAI_MODEL` (default `gpt-4o-mini`) and, if it needs one,
/// `KFS_TEST_OPENAI_API_KEY`.
pub fn real_model() -> Option<(String, String, Option<String>)> {
    let base_url = std::env::var("KFS_TEST_OPENAI_BASE_URL").ok().filter(|url| !url.trim().is_empty())?;
    let model = std::env::var("KFS_TEST_OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
    Some((base_url, model, std::env::var("KFS_TEST_OPENAI_API_KEY").ok()))
}

/// Whether `pdftotext` (Debian's poppler-utils), which the server reads PDFs with, runs here.
pub fn has_pdftotext() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        std::process::Command::new("pdftotext")
            .arg("-v")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok()
    })
}

/// Whether `python3` here imports the MCP SDK (`mcp` from PyPI) the Python client test uses.
pub fn has_python_mcp() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        std::process::Command::new("python3")
            .args(["-c", "import mcp"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

/// The Chromium the browser tests drive: `KFS_CHROMIUM`, or Debian's package.
pub fn chromium() -> std::path::PathBuf {
    std::env::var_os("KFS_CHROMIUM").map_or_else(|| "/usr/bin/chromium".into(), Into::into)
}

/// A test that needs no database (e.g. schema drift): `async fn name() -> anyhow::Result<()>`.
/// Build lists of them with [`plain_tests!`](crate::plain_tests).
#[derive(Debug, Clone)]
pub struct PlainTest {
    /// `<module>::<name>`.
    pub name: String,
    /// The test body.
    pub run: fn() -> TestFuture,
}

impl PlainTest {
    /// A test named after the module it is defined in and its function name.
    pub fn new(module_path: &str, name: &str, run: fn() -> TestFuture) -> Self {
        Self { name: qualified(module_path, name), run }
    }
}

/// `e2e::constraints::jobs` + `name` → `constraints::jobs::name`: the binary's name adds
/// nothing to a trial name.
fn qualified(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

/// Lists database tests that run on both backends: `db_tests![fn_a, fn_b]`. Tests about
/// PostgreSQL alone go after `; postgres_only:`. Each function must be
/// `async fn name(db: TestDb) -> anyhow::Result<()>`; with `#![deny(dead_code)]` in the
/// test binary, a test left out of every list fails the build.
#[macro_export]
macro_rules! db_tests {
    ($($name:ident),* $(,)? $(; postgres_only: $($pg_name:ident),+ $(,)?)?) => {{
        let both: ::std::vec::Vec<$crate::harness::DbTest> = ::std::vec![$(
            $crate::harness::DbTest::new(
                ::std::module_path!(),
                ::std::stringify!($name),
                &$crate::Backend::ALL,
                |db| ::std::boxed::Box::pin($name(db)),
            )
        ),*];
        let postgres_only: ::std::vec::Vec<$crate::harness::DbTest> = ::std::vec![$($(
            $crate::harness::DbTest::new(
                ::std::module_path!(),
                ::std::stringify!($pg_name),
                &[$crate::Backend::Postgres],
                |db| ::std::boxed::Box::pin($pg_name(db)),
            )
        ),+)?];
        both.into_iter().chain(postgres_only).collect::<::std::vec::Vec<_>>()
    }};
}

/// Lists tests that need no database: `plain_tests![fn_a, fn_b]`, each
/// `async fn name() -> anyhow::Result<()>`.
#[macro_export]
macro_rules! plain_tests {
    ($($name:ident),* $(,)?) => {
        ::std::vec![$(
            $crate::harness::PlainTest::new(
                ::std::module_path!(),
                ::std::stringify!($name),
                || ::std::boxed::Box::pin($name()),
            )
        ),*]
    };
}

/// Runs the binary's tests with libtest's command line and output, and returns its exit
/// code. Call it from `main`.
pub fn run(db_tests: Vec<DbTest>, plain_tests: Vec<PlainTest>) -> ExitCode {
    let config = TestConfig::from_env();
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        // libtest-mimic ignores RUST_TEST_THREADS; honour it like the standard harness.
        let from_env = std::env::var("RUST_TEST_THREADS").ok().and_then(|value| value.parse().ok());
        args.test_threads = Some(from_env.unwrap_or(DEFAULT_TEST_THREADS));
    }
    let skipped = skipped_banners(&config, &db_tests);
    if !args.list {
        skipped.iter().for_each(|banner| eprintln!("{banner}"));
        if config.postgres_url.is_none() && config.require_postgres {
            eprintln!("KFS_TEST_REQUIRE_POSTGRES is set, so a missing KFS_TEST_POSTGRES_URL is an error");
            return ExitCode::FAILURE;
        }
    }
    let trials = match trials(&config, db_tests, plain_tests) {
        Ok(trials) => trials,
        Err(duplicate) => {
            eprintln!("two tests are named {duplicate}; trial names must be unique");
            return ExitCode::FAILURE;
        }
    };
    let conclusion = libtest_mimic::run(&args, trials);
    // Again after the results: the last lines a newcomer reads must say what did not run.
    if !args.list {
        skipped.iter().for_each(|banner| eprintln!("{banner}"));
    }
    conclusion.exit_code()
}

/// One line per kind of trial this run lists as ignored, saying how to run it.
fn skipped_banners(config: &TestConfig, db_tests: &[DbTest]) -> Vec<String> {
    let mut banners = Vec::new();
    if config.postgres_url.is_none() {
        banners.push(
            "PostgreSQL tests SKIPPED: KFS_TEST_POSTGRES_URL is not set. To run them: \
             KFS_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo test --workspace"
                .to_owned(),
        );
    }
    if db_tests.iter().any(|test| test.needs_chromium) && !chromium().is_file() {
        banners.push(format!(
            "Browser tests SKIPPED: no Chromium at {} (apt-get install chromium, or point KFS_CHROMIUM at one)",
            chromium().display()
        ));
    }
    if db_tests.iter().any(|test| test.needs_pdftotext) && !has_pdftotext() {
        banners.push("PDF upload tests SKIPPED: no pdftotext here (apt-get install poppler-utils)".to_owned());
    }
    if db_tests.iter().any(|test| test.needs_python_mcp) && !has_python_mcp() {
        banners.push(
            "Python MCP SDK test SKIPPED: python3 cannot import mcp (pip install -r tests/python/requirements.txt)"
                .to_owned(),
        );
    }
    if db_tests.iter().any(|test| test.needs_real_model) && real_model().is_none() {
        banners.push(
            "Real-model smoke test SKIPPED: KFS_TEST_OPENAI_BASE_URL is not set (with KFS_TEST_OPENAI_MODEL and \
             KFS_TEST_OPENAI_API_KEY as the endpoint needs)"
                .to_owned(),
        );
    }
    banners
}

/// One trial per test and backend; fails with the first duplicate name.
fn trials(config: &TestConfig, db_tests: Vec<DbTest>, plain_tests: Vec<PlainTest>) -> Result<Vec<Trial>, String> {
    let mut trials = Vec::new();
    for test in db_tests {
        for &backend in test.backends {
            let config = config.clone();
            let run = test.run;
            let skipped = (backend == Backend::Postgres && config.postgres_url.is_none())
                || (test.needs_chromium && !chromium().is_file())
                || (test.needs_real_model && real_model().is_none())
                || (test.needs_pdftotext && !has_pdftotext())
                || (test.needs_python_mcp && !has_python_mcp());
            let name = format!("{}::{}", test.name, backend.name());
            let trial = Trial::test(name, move || on_runtime(TestDb::run(backend, &config, run)));
            trials.push(trial.with_ignored_flag(skipped));
        }
    }
    for test in plain_tests {
        let run = test.run;
        trials.push(Trial::test(test.name, move || on_runtime(with_deadline(run()))));
    }
    let mut seen = HashSet::new();
    match trials.iter().find(|trial| !seen.insert(trial.name().to_owned())) {
        Some(duplicate) => Err(duplicate.name().to_owned()),
        None => Ok(trials),
    }
}

/// Runs one trial on a runtime of its own (pools are tied to the runtime that opened
/// them), with two workers so servers and loops a test spawns run beside it.
fn on_runtime(test: impl Future<Output = anyhow::Result<()>>) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| Failed::from(format!("building the test runtime: {error}")))?;
    let outcome = runtime.block_on(test);
    // Tasks a test leaked (servers, loops) end here rather than keep the thread busy.
    runtime.shutdown_timeout(Duration::from_secs(5));
    outcome.map_err(|error| Failed::from(describe(&error)))
}

/// The error and its causes, one per line. Not `{:?}`: with `RUST_BACKTRACE` set that adds
/// a backtrace of the harness, which buries the one line that matters.
fn describe(error: &anyhow::Error) -> String {
    error.chain().map(ToString::to_string).collect::<Vec<_>>().join("\n  caused by: ")
}

/// Fails a test that has not finished within its deadline, so a hang fails one trial
/// (and still lets its databases be dropped) instead of stalling the whole run.
pub async fn with_deadline(test: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    match tokio::time::timeout(TEST_TIMEOUT, test).await {
        Ok(outcome) => outcome,
        Err(_) => Err(anyhow::anyhow!("timed out after {TEST_TIMEOUT:?}")),
    }
}
