//! Lines the tests leave for `test.sh`: a skip, and the size of a suite that covers points
//! (crash points, faults at every call). The test harness captures `eprintln!` of a passing
//! test, so a line written that way never reaches the log `test.sh` reads; these go straight
//! to the process's stderr, one `write` each (shorter than a pipe's atomic write, so parallel
//! tests cannot cut into one another's line).

use std::io::Write;

/// `SKIPPED <test>: <why>`, counted by `test.sh` as a skip (and not as a pass). Also what a
/// human sees with `--nocapture`.
pub fn skipped(test: &str, why: &str) {
    line(&format!("SKIPPED {test}: {why}"));
}

/// `COUNT <key> <n>`: how many points a suite covered, printed by `test.sh` and held to the
/// figure `docs/performance.md` states for `key`.
pub fn count(key: &str, n: usize) {
    line(&format!("COUNT {key} {n}"));
}

/// `NOTE <text>`: what a run drew (a seed, a sample), printed by `test.sh` so the run can be
/// repeated.
pub fn note(text: &str) {
    line(&format!("NOTE {text}"));
}

fn line(text: &str) {
    // No newline inside: a line is one record for test.sh's grep.
    let mut buf = text.replace(['\n', '\r'], " ");
    buf.push('\n');
    let _ = std::io::stderr().write_all(buf.as_bytes());
}
