//! Shared by the GPU test binaries.

use std::io::Write;

/// Says that a test skipped, and why, on the real stderr: libtest captures `eprintln!` of
/// passing tests, and a skip must be visible in the CI log.
pub fn report_skip(msg: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {msg}");
}
