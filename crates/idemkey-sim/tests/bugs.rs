//! Planted bugs: the checker catches each within a bounded number of seeds, breaking the
//! promise the bug is about, and the seed that caught it passes without the bug.

use idemkey_sim::{Bug, Property, SimConfig, Violation, run};

/// Each planted bug, the promises it can break, and within how many seeds from 0 the checker
/// must catch it. Which seed is the first to do so (and, for a skewed clock, which promise it
/// breaks first) depends on how the runs draw from their generator, and is not pinned.
const PLANTED: [(Bug, &[Property], u64); 3] = [
    (Bug::NoFencing, &[Property::StaleOwner], 50),
    (
        Bug::AppLeaseClock,
        &[
            Property::AckLost,
            Property::DoubleExecution,
            Property::StuckClaim,
        ],
        50,
    ),
    (Bug::ReleaseWithoutToken, &[Property::StaleOwner], 500),
];

/// The first seed from 0 that `bug` fails, within its bound, having broken one of its
/// promises (the tests print it).
fn first_caught(bug: Bug) -> Violation {
    let (_, properties, within) = PLANTED
        .into_iter()
        .find(|(planted, ..)| *planted == bug)
        .expect("a planted bug");
    let config = SimConfig::default().with_bug(bug);
    let caught = (0..within).find_map(|seed| run(seed, &config).err());
    let violation = caught.unwrap_or_else(|| panic!("{bug:?} survived {within} seeds"));
    println!("{bug:?} caught by {violation}");
    assert!(
        properties.contains(&violation.property),
        "{bug:?}: {violation}"
    );
    violation
}

#[test]
fn no_fencing_is_caught() {
    first_caught(Bug::NoFencing);
}

#[test]
fn app_lease_clock_is_caught() {
    first_caught(Bug::AppLeaseClock);
}

#[test]
fn release_without_token_is_caught() {
    first_caught(Bug::ReleaseWithoutToken);
}

#[test]
fn caught_seeds_pass_without_their_bug() {
    for (bug, ..) in PLANTED {
        let seed = first_caught(bug).seed;
        if let Err(violation) = run(seed, &SimConfig::default()) {
            panic!("seed {seed} fails without {bug:?}: {violation}");
        }
    }
}
