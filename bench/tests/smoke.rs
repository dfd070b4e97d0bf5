//! The benchmark runs for a moment on a tiny data set so it cannot rot; its
//! numbers are not asserted, only that every scenario ran without errors.

/// The server binary: built beside the bench's, since both crates are
/// default members of the workspace (`cargo test` builds every binary
/// before running any test).
fn votegraph_binary() -> std::path::PathBuf {
    let path =
        std::path::Path::new(env!("CARGO_BIN_EXE_votegraph-bench")).with_file_name("votegraph");
    assert!(path.exists(), "build the server first: {}", path.display());
    path
}

/// Runs the benchmark with `args` on 300 articles and returns its JSON.
fn run_bench(args: &[&str]) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("bench.json");
    // The tables the benchmark prints are kept, not shown: `cargo test`
    // stays quiet unless this fails.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_votegraph-bench"))
        .args(["--articles", "300"])
        .args(args)
        .arg("--votegraph")
        .arg(votegraph_binary())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run votegraph-bench");
    assert!(
        out.status.success(),
        "votegraph-bench failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn the_benchmark_runs_every_scenario() {
    let results = run_bench(&[
        "--users",
        "4000",
        "--connections",
        "4",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--subscribers",
        "10",
        "--vote-rate",
        "20",
    ]);
    let scenarios = results["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 16, "{results}");
    for s in scenarios {
        assert!(s["requests"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["errors"], 0, "{s}");
    }
    // Every scenario reports its Redis commands, and every scenario against
    // votegraph its server CPU, per request.
    let by_name = |name: &str| {
        scenarios
            .iter()
            .find(|s| s["scenario"] == name)
            .unwrap_or_else(|| panic!("no {name}: {results}"))
    };
    for s in scenarios {
        assert!(s["redis_commands_per_request"].is_f64(), "{s}");
        if s["scenario"] != "raw Redis front page" {
            assert!(s["server_cpu_us_per_request"].is_f64(), "{s}");
        }
    }
    // The anonymous front page comes from the response cache; a logged-in
    // reader's page is read from Redis, myVote included.
    let cmds = |name: &str| {
        by_name(name)["redis_commands_per_request"]
            .as_f64()
            .unwrap()
    };
    assert!(cmds("front page") < 1.0, "{}", cmds("front page"));
    assert!(
        cmds("front page, logged in") > 25.0,
        "{}",
        cmds("front page, logged in")
    );
    let subs = &results["subscribers"];
    assert_eq!(subs["subscribers"], 10);
    assert!(subs["votes"].as_u64().unwrap() > 0);
    assert_eq!(subs["delivered"], subs["expected_deliveries"], "{subs}");
    assert!(subs["deliveries_per_sec"].as_f64().unwrap() > 0.0, "{subs}");
    assert!(subs["server_cpu_us_per_delivery"].is_f64(), "{subs}");
}

#[test]
fn only_runs_the_named_scenarios() {
    let results = run_bench(&[
        "--users",
        "100",
        "--connections",
        "2",
        "--duration",
        "0.2",
        "--warmup",
        "0.1",
        "--only",
        "raw Redis",
        "--only",
        "article by id",
    ]);
    let names: Vec<&str> = results["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["article by id", "raw Redis front page"]);
    assert!(results["subscribers"].is_null(), "{results}");
}
