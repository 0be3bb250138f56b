//! End-to-end tests. Every database test runs twice, as `<module>::<name>::sqlite` and
//! `<module>::<name>::postgres`, each on a fresh migrated database; see the README's
//! "Run the tests" and `kfs_tests::harness`.
//!
//! `dead_code` is denied so that a test function missing from its module's `tests()` list
//! fails the build instead of silently never running.
#![deny(dead_code)]

use std::process::ExitCode;

mod constraints;
mod replay;

fn main() -> ExitCode {
    let db_tests = [constraints::tests(), replay::tests()].concat();
    kfs_tests::harness::run(db_tests, Vec::new())
}
