//! `idemkey-bench proxy-create proxy-replay`: the bench starts `idemkey proxy` in front of
//! its own API, on a fresh SQLite file, and both sides of both workloads run: keyed creates
//! and key-less ones through the proxy, replays (every answer `Idempotent-Replayed: true`,
//! or it counts as an error) and forwarded GETs; then `proxy-create` in front of both SQLite
//! upstreams in one run. No timing is asserted.

use serde_json::Value;

/// Requests per side.
const REQUESTS: u64 = 40;

#[idemkey_test_support::test]
fn proxy_workloads_run_both_sides_without_errors_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let output = crate::bench_command()
        .args(["proxy-create", "proxy-replay"])
        .args(["--requests", &REQUESTS.to_string()])
        .args(["--concurrency", "4", "--rounds", "2"])
        .args(["--json", json.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let workloads = report["workloads"].as_array().unwrap();
    let names: Vec<&str> = workloads
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["proxy-create", "proxy-replay"], "{report}");
    let side_names: [&[&str]; 2] = [
        &[
            "create with a fresh key, through the proxy",
            "create without a key, forwarded by the proxy",
            "create without a key, straight to the API",
        ],
        &[
            "replay of one key, through the proxy",
            "GET /v1/notes/{id}, forwarded by the proxy",
        ],
    ];
    for (workload, expected) in workloads.iter().zip(side_names) {
        let sides = workload["sides"].as_array().unwrap();
        let names: Vec<&str> = sides.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, expected, "{workload}");
        for side in sides {
            // Each side ran its whole budget, and every answer was the one expected of it: a
            // 201 that is not a replay for a create, a 201 replay (`Idempotent-Replayed:
            // true`) for a replay, a 200 for a GET; anything else counts as an error.
            assert_eq!(side["requests"], REQUESTS, "{side}");
            assert_eq!(side["errors"], 0, "{side}");
            assert!(side["throughput"].as_f64().unwrap() > 0.0, "{side}");
            // The proxy the bench started, and the machine, from /proc.
            for field in ["server_cpu_us", "machine_cpu_us"] {
                assert!(side[field].is_number(), "{field} in {side}");
            }
        }
        let notes = workload["notes"].as_array().unwrap();
        assert!(
            notes
                .iter()
                .any(|n| n.as_str().unwrap().contains("the API behind the proxy")),
            "{workload}"
        );
    }
    for prefix in [
        "proxy: keyed create / key-less create forwarded",
        "proxy: keyed create / key-less create straight to the API",
        "proxy: replay / GET",
    ] {
        let ratio = report["ratios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no ratio {prefix:?} in {report}"));
        assert!(ratio["value"].as_f64().unwrap() > 0.0, "{ratio}");
    }
    let database = report["setup"]["proxy_database"].as_str().unwrap();
    assert!(database.starts_with("sqlite://"), "{database}");
    assert!(
        stdout.contains("replay of one key, through the proxy"),
        "{stdout}"
    );
}

/// Both SQLite upstreams in one run, each with a proxy of its own: each `proxy-create` has
/// its three sides without errors, its two ratios named after its upstream, and a note of the
/// API's CPU time (its HTTP thread's and its SQLite connections').
#[idemkey_test_support::test]
fn proxy_create_runs_in_front_of_each_sqlite_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let output = crate::bench_command()
        .args(["proxy-create", "--upstream", "sqlite-normal,sqlite-full"])
        .args(["--requests", &REQUESTS.to_string()])
        .args(["--concurrency", "4", "--rounds", "2"])
        .args(["--json", json.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let workloads = report["workloads"].as_array().unwrap();
    let names: Vec<&str> = workloads
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["proxy-create (sqlite-normal)", "proxy-create (sqlite-full)"]
    );
    for (workload, api) in workloads.iter().zip(["sqlite-normal", "sqlite-full"]) {
        let sides = workload["sides"].as_array().unwrap();
        assert_eq!(sides.len(), 3, "{workload}");
        for side in sides {
            assert_eq!(side["requests"], REQUESTS, "{side}");
            assert_eq!(side["errors"], 0, "{side}");
        }
        let note = format!("the API behind the proxy ({api} notes");
        let notes = workload["notes"].as_array().unwrap();
        assert!(
            notes.iter().any(|n| n.as_str().unwrap().contains(&note)),
            "{workload}"
        );
        for ratio in ["forwarded (throughput)", "straight to the API (throughput)"] {
            let name = format!("{ratio}, {api} API");
            assert!(
                report["ratios"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["name"].as_str().unwrap().ends_with(&name)
                        && r["value"].as_f64().unwrap() > 0.0),
                "no ratio ending {name:?} in {report}"
            );
        }
    }
    assert_eq!(
        report["setup"]["proxy_upstreams"],
        serde_json::json!(["sqlite-normal", "sqlite-full"])
    );
}
