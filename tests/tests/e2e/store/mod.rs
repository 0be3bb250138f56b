//! The store's driver-level suite: every backend-specific operation runs on both backends
//! against the same expectations, so a third backend would know what it must pass.
pub mod grants;
pub mod knowledge;
pub mod rest;
pub mod writes;

use kfs_tests::DbTest;

/// Every test of the suite.
pub fn tests() -> Vec<DbTest> {
    [grants::tests(), writes::tests(), knowledge::tests(), rest::tests()].into_iter().flatten().collect()
}
