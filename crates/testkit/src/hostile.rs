//! The settings every hostile-input (property-based) suite shares: how many cases, which
//! seed, and how a failure names the seed that reproduces it.
//!
//! A default `cargo test` runs a modest sample with a fresh seed each time, printed on stderr
//! (`--nocapture` shows it; a failure repeats it), so CI keeps exploring new inputs while any
//! failure can be replayed exactly:
//!
//! ```text
//! BNERD_HOSTILE_SEED=<seed> cargo test -p bnerd-engine --test hostile
//! BNERD_HOSTILE_CASES=5000 cargo test -p bnerd-engine --test hostile -p bnerd-cloud --test hostile_bodies
//! ```

use std::io::Write;

use proptest::test_runner::{Config, RngSeed, TestRunner};

/// The seed of this run: `BNERD_HOSTILE_SEED`, or a new one from the clock.
pub fn seed() -> u64 {
    match std::env::var("BNERD_HOSTILE_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("BNERD_HOSTILE_SEED={s:?} is not a u64")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    }
}

/// The case count of this run: `BNERD_HOSTILE_CASES`, or `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("BNERD_HOSTILE_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// A runner for one property: `cases` (scaled by `BNERD_HOSTILE_CASES`), a printed seed, no
/// regression files written into the source tree (the seed is the reproduction), and a
/// bounded shrink so a failure on a 10 MiB input does not shrink for minutes.
pub fn runner(property: &str, default_cases: u32) -> (TestRunner, u64) {
    let seed = seed();
    let cases = cases(default_cases);
    // Straight to stderr, past the test harness's capture: the seed belongs in every CI log,
    // passing runs included, so a later failure's input space can be compared.
    let _ = writeln!(
        std::io::stderr(),
        "hostile {property}: {cases} cases, BNERD_HOSTILE_SEED={seed}"
    );
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 256,
        max_shrink_time: 30_000,
        ..Config::default()
    };
    (TestRunner::new(config), seed)
}

/// Fail the test with what proptest found and the seed that finds it again.
#[track_caller]
pub fn check<T: std::fmt::Debug>(
    property: &str,
    seed: u64,
    result: Result<(), proptest::test_runner::TestError<T>>,
) {
    if let Err(e) = result {
        let shown = format!("{e}");
        // A minimal failing input can still be megabytes: the head is what a human reads.
        let shown: String = shown.chars().take(4000).collect();
        panic!("hostile {property} failed (replay: BNERD_HOSTILE_SEED={seed}): {shown}");
    }
}
