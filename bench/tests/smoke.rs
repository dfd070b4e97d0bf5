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
    run_bench_logged(args).0
}

/// Like [`run_bench`], also returning what the bench wrote to stderr.
fn run_bench_logged(args: &[&str]) -> (serde_json::Value, String) {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("bench.json");
    // The tables the benchmark prints are kept, not shown: `cargo test`
    // stays quiet unless this fails.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_votegraph-bench"))
        .args(["--articles", "300"])
        .args(args)
        .arg("--votegraph")
        .arg(votegraph_binary())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run votegraph-bench");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "votegraph-bench failed ({}):\n{}\n{stderr}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    let results = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (results, stderr)
}

/// The names of the scenarios a run measured, in order.
fn scenario_names(results: &serde_json::Value) -> Vec<&str> {
    results["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect()
}

/// Whether this machine can run the Node peer.
fn node_present() -> bool {
    ["node", "npm"].iter().all(|program| {
        std::process::Command::new(program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The arguments of a short logged-in run, for the peer tests (the busy
/// scenario's name has "logged in" in it too).
const LOGGED_IN_RUN: [&str; 13] = [
    "--users",
    "200",
    "--connections",
    "2",
    "--duration",
    "0.3",
    "--warmup",
    "0.1",
    "--subscribers",
    "0",
    "--quick",
    "--only",
    "logged in",
];

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
        "--busy-votes",
        "70",
        // The peer has tests of its own.
        "--no-peer",
    ]);
    let scenarios = results["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 26, "{results}");
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
        let raw = s["scenario"].as_str().unwrap().starts_with("raw Redis");
        assert_eq!(s["server_cpu_us_per_request"].is_f64(), !raw, "{s}");
    }
    // The anonymous front page comes from the response cache; a logged-in
    // reader's page from its shared template, filled with the reader's
    // votes: one script that runs the session's GET, its account's HMGET
    // and one ZMSCORE (Redis counts the script's call too).
    let cmds = |name: &str| {
        by_name(name)["redis_commands_per_request"]
            .as_f64()
            .unwrap()
    };
    assert!(cmds("front page") < 1.0, "{}", cmds("front page"));
    let logged_in = cmds("front page, logged in");
    assert!((3.9..5.0).contains(&logged_in), "{logged_in}");
    // The N+1 baseline sends what the batched floor sends, one at a time:
    // the same commands per page.
    for (batched, n_plus_1) in [
        ("raw Redis front page", "raw Redis N+1"),
        (
            "raw Redis front page, 1 ms hop, 1 client",
            "raw Redis N+1, 1 ms hop, 1 client",
        ),
    ] {
        assert!(
            (cmds(batched) - cmds(n_plus_1)).abs() < 1.0,
            "{batched} {} vs {n_plus_1} {}",
            cmds(batched),
            cmds(n_plus_1)
        );
    }
    // Logged in, the batched page adds the session and one ZMSCORE of the
    // reader's votes; N+1 adds the session and one ZSCORE per article.
    let anonymous = cmds("raw Redis front page");
    assert!((cmds("raw Redis front page, logged in") - (anonymous + 2.0)).abs() < 1.0);
    let per_article = anonymous - 1.0;
    assert!((cmds("raw Redis N+1, logged in") - (anonymous + 1.0 + per_article)).abs() < 1.0);
    // The busy page's votes landed, none refused (its errors above count
    // them), on front-page articles, while 3,000 readers read.
    let busy = by_name("front page, logged in, busy");
    assert_busy_votes_landed(busy);
    assert_eq!(busy["vote_stream"]["readers"], 3000, "{busy}");
    for key in [
        "batched_vs_raw_n_plus_1",
        "raw_batched_vs_raw_n_plus_1",
        "batched_vs_raw_n_plus_1_with_1ms_hop",
        "batched_vs_raw_n_plus_1_with_1ms_hop_1_client",
        "raw_batched_vs_raw_n_plus_1_with_1ms_hop_1_client",
        "logged_in_vs_raw_redis",
        "busy_vs_raw_redis",
        "busy_p99_vs_logged_in_p99",
        "group_page_p99_vs_front_page_p99",
        "front_page_vs_http_limit",
    ] {
        assert!(results["ratios"][key].as_f64().unwrap() > 0.0, "{key}");
    }
    assert_eq!(results["node_peer"]["status"], "not run");
    // Two subscription runs: without and with the article read per event.
    let runs = results["subscribers"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{results}");
    assert!(runs[1]["document"].as_str().unwrap().contains("article"));
    for subs in runs {
        assert_eq!(subs["subscribers"], 10);
        assert!(subs["votes"].as_u64().unwrap() > 0);
        assert_eq!(subs["delivered"], subs["expected_deliveries"], "{subs}");
        assert!(subs["deliveries_per_sec"].as_f64().unwrap() > 0.0, "{subs}");
        assert!(subs["server_cpu_us_per_delivery"].is_f64(), "{subs}");
        // Measured in 10 ms clock ticks: a run this small may read 0.
        assert!(
            subs["bench_cpu_us_per_delivery"].as_f64().unwrap() >= 0.0,
            "{subs}"
        );
    }
}

/// The busy scenario's vote stream sent votes during the measurement and
/// every vote it sent landed.
fn assert_busy_votes_landed(busy: &serde_json::Value) {
    assert_eq!(busy["errors"], 0, "{busy}");
    let votes = &busy["vote_stream"];
    assert_eq!(votes["errors"], 0, "{busy}");
    assert!(votes["landed"].as_u64().unwrap() > 0, "{busy}");
    assert_eq!(votes["landed"], votes["sent"], "{busy}");
    assert!(votes["landed_per_s"].as_f64().unwrap() > 0.0, "{busy}");
    assert!(!votes["articles"].as_array().unwrap().is_empty(), "{busy}");
}

/// `--only busy` runs the busy scenario alone; with fewer load users than
/// it reads as, sessions are added so that 200 distinct readers read.
#[test]
fn the_busy_scenario_runs_alone_with_200_readers_at_least() {
    let results = run_bench(&[
        "--users",
        "100",
        "--connections",
        "4",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--busy-votes",
        "50",
        "--only",
        "busy",
    ]);
    assert_eq!(
        scenario_names(&results),
        ["front page, logged in, busy"],
        "{results}"
    );
    let busy = &results["scenarios"][0];
    assert!(busy["requests"].as_u64().unwrap() > 0, "{busy}");
    assert_busy_votes_landed(busy);
    assert_eq!(busy["vote_stream"]["readers"], 200, "{busy}");
    assert_eq!(busy["vote_stream"]["target_per_s"], 50.0, "{busy}");
}

/// Fewer than one busy vote a second is refused before anything starts.
#[test]
fn busy_votes_below_one_a_second_are_refused() {
    for rate in ["0", "0.5", "-3", "NaN", "inf"] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_votegraph-bench"))
            // One argument, so "-3" is read as the flag's value.
            .arg(format!("--busy-votes={rate}"))
            .output()
            .expect("run votegraph-bench");
        assert!(!output.status.success(), "{rate}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--busy-votes"), "{rate}: {stderr}");
    }
}

/// `--only "HTTP limit"` runs the HTTP limit alone: a process of its own
/// answering the front page's bytes, whose requests count as successes (no
/// GraphQL errors in them) and whose CPU is measured as a server's.
#[test]
fn the_http_limit_runs_alone() {
    let results = run_bench(&[
        "--users",
        "100",
        "--connections",
        "2",
        "--duration",
        "0.2",
        "--warmup",
        "0.1",
        "--quick",
        "--only",
        "HTTP limit",
    ]);
    assert_eq!(
        scenario_names(&results),
        ["HTTP limit (poem, front page bytes)"],
        "{results}"
    );
    let limit = &results["scenarios"][0];
    assert!(limit["requests"].as_u64().unwrap() > 0, "{limit}");
    assert_eq!(limit["errors"], 0, "{limit}");
    assert!(limit["server_cpu_us_per_request"].is_f64(), "{limit}");
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
        "--quick",
    ]);
    let names = scenario_names(&results);
    assert_eq!(
        names,
        [
            "article by id",
            "raw Redis front page",
            "raw Redis front page, logged in"
        ]
    );
    assert_eq!(results["subscribers"], serde_json::json!([]), "{results}");
    assert_eq!(results["node_peer"]["status"], "not run");
}

/// With Node, the peer is installed (or reused), checked against votegraph,
/// measured on the logged-in page, and compared; without, the bench says so
/// in one line and measures the rest.
#[test]
fn the_node_peer_runs_beside_votegraph_when_node_is_present() {
    let (results, stderr) = run_bench_logged(&LOGGED_IN_RUN);
    let peer = &results["node_peer"];
    let scenarios = results["scenarios"].as_array().unwrap();
    let names = scenario_names(&results);
    if !node_present() {
        assert_eq!(peer["status"], "skipped", "{results}");
        assert_eq!(stderr.matches("Node peer skipped: ").count(), 1, "{stderr}");
        assert_eq!(
            names,
            [
                "front page, logged in",
                "front page, logged in, busy",
                "raw Redis front page, logged in"
            ]
        );
        return;
    }
    assert_eq!(peer["status"], "measured", "{results}\n{stderr}");
    assert!(
        peer["check"].as_str().unwrap().starts_with("identical"),
        "{peer}"
    );
    assert_eq!(
        names,
        [
            "front page, logged in",
            "front page, logged in, busy",
            "front page, logged in, Node peer",
            "raw Redis front page, logged in"
        ]
    );
    let node = &scenarios[2];
    let raw = &scenarios[3];
    assert!(node["requests"].as_u64().unwrap() > 0, "{node}");
    assert_eq!(node["errors"], 0, "{node}");
    assert!(node["server_cpu_us_per_request"].is_f64(), "{node}");
    // The same Redis work as the raw floor's logged-in page (votegraph
    // itself sends it once per shared template, then one script of two
    // commands).
    let cmds = |s: &serde_json::Value| s["redis_commands_per_request"].as_f64().unwrap();
    assert!((cmds(node) - cmds(raw)).abs() < 1.0, "{node} {raw}");
    for key in [
        "logged_in_vs_node_peer",
        "logged_in_vs_raw_redis",
        "logged_in_cpu_per_request_node_peer_vs_votegraph",
    ] {
        assert!(results["ratios"][key].as_f64().unwrap() > 0.0, "{key}");
    }
}

/// Without Node the peer is skipped with one line, whatever this machine
/// has: `--node` names a program that does not exist.
#[test]
fn a_missing_node_skips_the_peer_in_one_line() {
    let mut args = LOGGED_IN_RUN.to_vec();
    args.extend(["--node", "/nonexistent/votegraph-bench/node"]);
    let (results, stderr) = run_bench_logged(&args);
    let skipped: Vec<&str> = stderr.lines().filter(|l| l.contains("Node peer")).collect();
    assert_eq!(skipped.len(), 1, "{stderr}");
    assert!(skipped[0].starts_with("Node peer skipped: "), "{stderr}");
    assert!(
        skipped[0].contains("/nonexistent/votegraph-bench/node"),
        "{stderr}"
    );
    assert_eq!(results["node_peer"]["status"], "skipped");
    let names = scenario_names(&results);
    assert_eq!(
        names,
        [
            "front page, logged in",
            "front page, logged in, busy",
            "raw Redis front page, logged in"
        ]
    );
}
