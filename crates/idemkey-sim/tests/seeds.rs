//! The correct protocol over many seeds, exact replay of a seed, and the long run.

use std::env;
use std::time::Instant;

use idemkey_sim::{Bug, SimConfig, Stats, Violation, run};
use sha2::{Digest, Sha256};

/// Seeds CI runs: about 5 s in a debug build on the 2-core development machine.
const CI_SEEDS: u64 = 1_000;

fn env_u64(name: &str) -> Option<u64> {
    env::var(name).ok().and_then(|value| value.parse().ok())
}

fn bug_from_env() -> Option<Bug> {
    match env::var("IDEMKEY_SIM_BUG").ok()?.as_str() {
        "no-fencing" => Some(Bug::NoFencing),
        "app-lease-clock" => Some(Bug::AppLeaseClock),
        "release-without-token" => Some(Bug::ReleaseWithoutToken),
        other => panic!("unknown IDEMKEY_SIM_BUG {other:?}"),
    }
}

/// Runs `seeds`, returning the violations, the counts and a digest of every history.
fn campaign(seeds: std::ops::Range<u64>, config: &SimConfig) -> (Vec<Violation>, Stats, String) {
    let mut violations = Vec::new();
    let mut stats = Stats::default();
    let mut digest = Sha256::new();
    for seed in seeds {
        match run(seed, config) {
            Ok(history) => {
                digest.update(history.digest().as_bytes());
                stats += Stats::of(&history);
            }
            Err(violation) => {
                digest.update(violation.history.digest().as_bytes());
                eprintln!("{violation}");
                violations.push(violation);
            }
        }
    }
    (violations, stats, hex::encode(digest.finalize()))
}

#[test]
fn correct_protocol_passes_1000_seeds() {
    let (violations, stats, _) = campaign(0..CI_SEEDS, &SimConfig::default());
    println!("{stats}");
    assert!(violations.is_empty(), "{} seeds failed", violations.len());
    // The seeds reach what they are meant to: takeovers, fencing, kills, lost replies, expiry.
    for (what, count) in [
        ("reclaims", stats.reclaims),
        ("fenced", stats.fenced),
        ("killed", stats.killed),
        ("lost replies", stats.lost_replies),
        ("records after expiry", stats.records_after_expiry),
        ("sweeps", stats.sweeps),
        ("deduplicated effects", stats.deduplicated),
        ("key reused", stats.key_reused),
    ] {
        assert!(count > CI_SEEDS / 2, "too few {what}: {count}");
    }
}

#[test]
fn replay_is_exact() {
    let config = SimConfig::default();
    for seed in 0..30 {
        let first = run(seed, &config).expect("passes").digest();
        let again = run(seed, &config).expect("passes").digest();
        assert_eq!(first, again, "seed {seed} did not replay exactly");
    }
    // A failing seed fails the same way again.
    let buggy = config.with_bug(Bug::AppLeaseClock);
    let first = run(2, &buggy).expect_err("caught");
    let again = run(2, &buggy).expect_err("caught");
    assert_eq!(first.history.digest(), again.history.digest());
    assert_eq!((first.property, first.at_ms), (again.property, again.at_ms));
}

/// `IDEMKEY_SIM_SEEDS=100000 cargo test -p idemkey-sim --release --test seeds -- --ignored
/// long_run --nocapture` (and `IDEMKEY_SIM_FROM`, `IDEMKEY_SIM_BUG`).
#[test]
#[ignore = "long: run by hand, see docs/simulation.md"]
fn long_run() {
    let from = env_u64("IDEMKEY_SIM_FROM").unwrap_or(0);
    let count = env_u64("IDEMKEY_SIM_SEEDS").unwrap_or(100_000);
    let config = SimConfig {
        bug: bug_from_env(),
        ..SimConfig::default()
    };
    let start = Instant::now();
    let (violations, stats, digest) = campaign(from..from + count, &config);
    println!(
        "seeds {from}..{}: {} failed in {:.1?}",
        from + count,
        violations.len(),
        start.elapsed()
    );
    println!("{stats}");
    println!("digest of every history: {digest}");
    assert!(violations.is_empty());
}

/// `IDEMKEY_SIM_SEED=<n> cargo test -p idemkey-sim --test seeds replay_one_seed -- --ignored
/// --nocapture`: prints the seed's whole history, then its verdict.
#[test]
#[ignore = "replays the seed in IDEMKEY_SIM_SEED"]
fn replay_one_seed() {
    let seed = env_u64("IDEMKEY_SIM_SEED").expect("set IDEMKEY_SIM_SEED");
    let config = SimConfig {
        bug: bug_from_env(),
        ..SimConfig::default()
    };
    match run(seed, &config) {
        Ok(history) => {
            println!("{history}");
            println!(
                "seed {seed} passes: {}; digest {}",
                Stats::of(&history),
                history.digest()
            );
        }
        Err(violation) => {
            println!("{}", violation.history);
            panic!("{violation}");
        }
    }
}
