//! Planted bugs: the checker catches each within a bounded number of seeds, and the seeds
//! that caught them stay caught (with the bug) and pass (without it).

use idemkey_sim::{Bug, Property, SimConfig, Violation, run};

/// The first seed that caught each bug, and the promise it broke (`bug_is_caught` prints
/// them). Each must fail with its bug and pass on idemkey as it is.
const CAUGHT: [(Bug, u64, Property); 3] = [
    (Bug::NoFencing, SEED_NO_FENCING, Property::StaleOwner),
    (Bug::AppLeaseClock, SEED_APP_CLOCK, Property::AckLost),
    (Bug::ReleaseWithoutToken, SEED_RELEASE, Property::StaleOwner),
];
const SEED_NO_FENCING: u64 = 2;
const SEED_APP_CLOCK: u64 = 0;
const SEED_RELEASE: u64 = 47;

/// The first seed from 0 that `bug` fails, within `within` seeds.
fn first_caught(bug: Bug, within: u64) -> Violation {
    let config = SimConfig::default().with_bug(bug);
    let caught = (0..within).find_map(|seed| run(seed, &config).err());
    let violation = caught.unwrap_or_else(|| panic!("{bug:?} survived {within} seeds"));
    println!("{bug:?} caught by {violation}");
    violation
}

#[test]
fn no_fencing_is_caught() {
    let caught = first_caught(Bug::NoFencing, 50);
    assert_eq!(
        (caught.seed, caught.property),
        (SEED_NO_FENCING, Property::StaleOwner)
    );
}

#[test]
fn app_lease_clock_is_caught() {
    let caught = first_caught(Bug::AppLeaseClock, 50);
    assert_eq!(
        (caught.seed, caught.property),
        (SEED_APP_CLOCK, Property::AckLost)
    );
}

#[test]
fn release_without_token_is_caught() {
    let caught = first_caught(Bug::ReleaseWithoutToken, 500);
    assert_eq!(
        (caught.seed, caught.property),
        (SEED_RELEASE, Property::StaleOwner)
    );
}

#[test]
fn caught_seeds_fail_with_their_bug_and_pass_without() {
    for (bug, seed, property) in CAUGHT {
        let config = SimConfig::default();
        let buggy = run(seed, &config.clone().with_bug(bug)).expect_err("the bug is caught");
        assert_eq!(buggy.property, property, "{bug:?}, seed {seed}: {buggy}");
        if let Err(violation) = run(seed, &config) {
            panic!("seed {seed} fails without the bug: {violation}");
        }
    }
}
