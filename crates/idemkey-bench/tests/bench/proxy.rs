//! `idemkey-bench proxy-create proxy-replay`: the bench starts `idemkey proxy` in front of
//! its own API, on a fresh SQLite file, and both sides of both workloads run: keyed creates
//! and key-less ones through the proxy, replays (every answer `Idempotent-Replayed: true`,
//! or it counts as an error) and forwarded GETs. No timing is asserted.

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
    let side_names = [
        [
            "create with a fresh key, through the proxy",
            "create without a key, forwarded by the proxy",
        ],
        [
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
    for prefix in ["proxy: keyed create / key-less", "proxy: replay / GET"] {
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
