//! `idemkey-bench` as a user runs it: tiny budgets against a server it starts itself, the
//! JSON report's shape and the storm's one-note-per-key check. No timing is asserted.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

pub(crate) fn bench(args: &[&str]) -> Output {
    crate::bench_command()
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn report(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every side of every workload sent requests and counted no error: the bench exits 0 with
/// errors (only the storm's check fails a run), so a run "without errors" must be read.
fn assert_no_errors(report: &Value) {
    for workload in report["workloads"].as_array().unwrap() {
        for side in workload["sides"].as_array().unwrap() {
            assert!(
                side["requests"].as_u64().unwrap() > 0,
                "no requests: {side}"
            );
            assert_eq!(
                side["errors"].as_u64(),
                Some(0),
                "{}: {side}",
                workload["name"]
            );
        }
    }
}

fn assert_shape(report: &Value, workloads: &[&str]) {
    let names: Vec<&str> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, workloads);
    for workload in report["workloads"].as_array().unwrap() {
        for side in workload["sides"].as_array().unwrap() {
            for field in [
                "requests",
                "errors",
                "throughput",
                "p50_us",
                "p99_us",
                "p999_us",
            ] {
                assert!(side[field].is_number(), "{field} missing in {side}");
            }
        }
    }
    for ratio in report["ratios"].as_array().unwrap() {
        assert!(
            ratio["name"].is_string() && ratio["value"].is_number(),
            "{ratio}"
        );
    }
    assert!(report["setup"]["concurrency"].is_number());
}

fn ratio<'a>(report: &'a Value, starts_with: &str) -> &'a Value {
    report["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"].as_str().unwrap().starts_with(starts_with))
        .unwrap_or_else(|| panic!("no ratio {starts_with:?} in {report}"))
}

#[idemkey_test_support::test]
fn http_workloads_on_a_self_started_sqlite_server() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let output = bench(&[
        "--requests",
        "50",
        "--concurrency",
        "4",
        "--storm-clients",
        "8",
        "--rounds",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("create with a fresh key") && stdout.contains("ratio"));
    let report = report(&json);
    assert_shape(&report, &["create", "replay", "storm", "mixed"]);
    let storm = ratio(&report, "storm: keys with exactly one note");
    assert_eq!(storm["met"], true, "{storm}");
    for workload in report["workloads"].as_array().unwrap() {
        for side in workload["sides"].as_array().unwrap() {
            assert_eq!(side["errors"], 0, "{side}");
        }
    }
    // The server the bench started, and the machine, from /proc (these tests run on Linux;
    // 0 is possible, as /proc counts in 10 ms ticks); none for the storm and the mix, whose
    // rounds mix classes of answers.
    for workload in report["workloads"].as_array().unwrap() {
        let mixes = workload["name"] == "storm" || workload["name"] == "mixed";
        for side in workload["sides"].as_array().unwrap() {
            for field in ["server_cpu_us", "machine_cpu_us"] {
                let cpu = &side[field];
                let expected = if mixes {
                    cpu.is_null()
                } else {
                    cpu.is_number()
                };
                assert!(expected, "{field} in {side}");
            }
        }
    }
}

#[idemkey_test_support::test]
fn ceiling_and_layer_run_without_errors() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let db = format!("sqlite://{}", dir.path().join("bench.db").display());
    let output = bench(&[
        "ceiling",
        "layer",
        "--requests",
        "20",
        "--concurrency",
        "2",
        "--rounds",
        "2",
        "--database-url",
        &db,
        "--mode",
        "lease",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = report(&json);
    assert_shape(&report, &["ceiling", "layer"]);
    assert_no_errors(&report);
    assert_eq!(report["workloads"][1]["sides"].as_array().unwrap().len(), 6);
    assert!(ratio(&report, "lease create / raw two-row").is_object());
}

#[idemkey_test_support::test]
fn bad_arguments_are_one_line_and_exit_2() {
    for args in [
        &["--concurrency", "0"][..],
        &["--url", "http://127.0.0.1:1"],
        &["--duration", "soon"],
        &["--requests", "5", "--duration", "1s"],
        &["nosuchworkload"],
    ] {
        let output = bench(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
    // A missing argument is named, not only announced.
    let stderr =
        String::from_utf8_lossy(&bench(&["--url", "http://127.0.0.1:1"]).stderr).into_owned();
    assert!(stderr.contains("--token"), "{stderr}");
}

/// The inbox workload on each broker: every side consumed its messages, both ratios reported.
fn inbox_on(broker: &str) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let output = bench(&[
        "inbox",
        "--broker",
        broker,
        "--requests",
        "60",
        "--concurrency",
        "4",
        "--rounds",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = report(&json);
    let name = report["workloads"][0]["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("inbox ("), "{name}");
    assert_no_errors(&report);
    assert_eq!(report["workloads"][0]["sides"].as_array().unwrap().len(), 4);
    assert!(ratio(&report, "inbox / plain consumer").is_object());
    assert!(ratio(&report, "inbox with outbox / plain consumer").is_object());
}

#[idemkey_test_support::test(needs = [nats])]
fn the_inbox_workload_on_jetstream() {
    inbox_on(&idemkey_test_support::runner::needs::nats_url());
}

#[idemkey_test_support::test(needs = [rabbitmq])]
fn the_inbox_workload_on_rabbitmq() {
    inbox_on(&idemkey_test_support::runner::needs::amqp_url());
}
