//! The `votegraph` binary itself, as the README's first command runs it.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{eventually, free_port, poll_until, spawn_app, spawn_app_with};

/// Starts the binary with its own redis-server in `data`; returns it and its address.
async fn start_binary(data: &std::path::Path) -> (std::process::Child, String) {
    start_binary_with(data, |command| {
        command.stdout(Stdio::null()).stderr(Stdio::null());
    })
    .await
}

/// [`start_binary`], with the command changed by `configure` first.
async fn start_binary_with(
    data: &std::path::Path,
    configure: impl FnOnce(&mut Command),
) -> (std::process::Child, String) {
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_votegraph"));
    command
        .env_remove("REDIS_URL")
        .env("VOTEGRAPH_BIND", format!("127.0.0.1:{port}"))
        .env("VOTEGRAPH_DATA_DIR", data)
        .env("VOTEGRAPH_ARGON2_MEMORY_KIB", "1024")
        .env("VOTEGRAPH_ARGON2_ITERATIONS", "1");
    configure(&mut command);
    let mut child = command.spawn().unwrap();
    let address = format!("http://127.0.0.1:{port}");
    let health = format!("{address}/health");
    let up = poll_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let response = reqwest::get(&health).await;
            response.is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    if up.is_ok() {
        return (child, address);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("votegraph did not start");
}

async fn gql(address: &str, query: &str, token: Option<&str>) -> Value {
    let mut request = reqwest::Client::new()
        .post(format!("{address}/graphql"))
        .json(&json!({ "query": query }));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().json().await.unwrap()
}

fn redis_processes_in(data: &std::path::Path) -> usize {
    let out = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("redis-server") && l.contains(&*data.to_string_lossy()))
        .count()
}

#[tokio::test]
async fn without_redis_url_the_server_runs_its_own_persistent_redis() {
    let data = tempfile::Builder::new().prefix("vgd").tempdir().unwrap();
    let (mut server, address) = start_binary(data.path()).await;
    let signed = gql(
        &address,
        "mutation { signUp(name: \"alice\", password: \"password1\") { token } }",
        None,
    )
    .await;
    let token = signed["data"]["signUp"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let posted = gql(
        &address,
        "mutation { post(title: \"kept\", link: \"https://e.com\") { id } }",
        Some(&token),
    )
    .await;
    assert_eq!(posted["data"]["post"]["id"], "1", "{posted}");
    assert_eq!(redis_processes_in(data.path()), 1);

    // SIGTERM: a graceful stop that also saves and stops the local Redis.
    stop_gracefully(&mut server, data.path()).await;

    // Started again on the same data directory, the data is still there.
    let (mut server, address) = start_binary(data.path()).await;
    let data_back = gql(&address, "{ articles { title } }", None).await;
    assert_eq!(
        data_back["data"]["articles"][0]["title"], "kept",
        "{data_back}"
    );
    // Stopped the same way, so its redis-server does not outlive the test
    // (SIGKILL would leave it running).
    stop_gracefully(&mut server, data.path()).await;
}

/// Stops a votegraph binary with SIGTERM and checks that its own
/// redis-server stopped with it.
async fn stop_gracefully(server: &mut std::process::Child, data: &std::path::Path) {
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let stopped = poll_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || server.try_wait().unwrap().is_some(),
    )
    .await
    .is_ok();
    if !stopped {
        let _ = server.kill();
        let _ = server.wait();
    }
    assert!(stopped, "votegraph stopped on SIGTERM");
    assert_eq!(
        redis_processes_in(data),
        0,
        "its redis-server stopped with it"
    );
}

#[test]
fn a_missing_redis_server_is_explained() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_votegraph"))
        .env_remove("REDIS_URL")
        .env("VOTEGRAPH_BIND", "127.0.0.1:0")
        .env("VOTEGRAPH_DATA_DIR", data.path())
        .env("VOTEGRAPH_REDIS_SERVER", "/nonexistent/redis-server")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("apt-get install -y redis-server"),
        "{stderr}"
    );
    assert!(stderr.contains("REDIS_URL"), "{stderr}");
}

#[tokio::test]
async fn queries_work_over_get_and_cors_allows_browsers() {
    let app = spawn_app().await;
    let body: Value = app
        .client
        .get(format!("{}/graphql", app.address))
        .query(&[("query", "{ articleCount }")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["data"]["articleCount"], 0);

    let preflight = app
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/graphql", app.address))
        .header("origin", "https://spa.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let allowed = preflight.headers()["access-control-allow-origin"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        allowed == "https://spa.example" || allowed == "*",
        "{allowed}"
    );
    let headers = preflight.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(headers.contains("authorization"), "{headers}");
}

#[tokio::test]
async fn cors_can_be_limited_to_named_origins() {
    let app = spawn_app_with(|s| s.cors_origins = vec!["https://app.example".into()]).await;
    let preflight = |origin: &'static str| {
        app.client
            .request(reqwest::Method::OPTIONS, format!("{}/graphql", app.address))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .send()
    };
    let allowed = preflight("https://app.example").await.unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let refused = preflight("https://evil.example").await.unwrap();
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

/// A votegraph binary on its own data directory, stopped with SIGTERM (so
/// its redis-server saves and stops too) when dropped, on every path.
struct Running {
    child: std::process::Child,
    address: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return; // Already stopped (and its pid perhaps reused).
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..200 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary on `data` until it exits (it should refuse at once),
/// and returns whether it succeeded and its stderr.
fn run_to_exit(data: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_votegraph"))
        .env_remove("REDIS_URL")
        .env("VOTEGRAPH_BIND", "127.0.0.1:0")
        .env("VOTEGRAPH_DATA_DIR", data)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_second_server_on_the_same_data_directory_refuses_and_touches_nothing() {
    let data = tempfile::Builder::new().prefix("vgd").tempdir().unwrap();
    let (child, address) = start_binary(data.path()).await;
    let first = Running { child, address };
    let token = gql(
        &first.address,
        "mutation { signUp(name: \"alice\", password: \"password1\") { token } }",
        None,
    )
    .await["data"]["signUp"]["token"]
        .as_str()
        .unwrap()
        .to_owned();

    let (ok, stderr) = run_to_exit(data.path());
    assert!(!ok, "the second server must not start");
    assert!(
        stderr.contains("another votegraph")
            && stderr.contains("already running on the data directory")
            && stderr.contains(&first.child.id().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("--data-dir"), "says what to do: {stderr}");

    // The first one is untouched: its Redis, its socket, its data.
    assert_eq!(redis_processes_in(data.path()), 1);
    assert!(data.path().join("redis.sock").exists());
    let posted = gql(
        &first.address,
        "mutation { post(title: \"still here\", link: \"https://e.com\") { id } }",
        Some(&token),
    )
    .await;
    assert_eq!(posted["data"]["post"]["id"], "1", "{posted}");
    let mut first = first;
    stop_gracefully(&mut first.child, data.path()).await;
}

/// A redis-server started by hand on a data directory, as a votegraph
/// killed with SIGKILL leaves it; killed when dropped.
struct Orphan(std::process::Child);

impl Drop for Orphan {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_redis_left_running_on_the_data_directory_is_not_replaced() {
    let data = tempfile::Builder::new().prefix("vgd").tempdir().unwrap();
    let socket = data.path().join("redis.sock");
    let orphan = Orphan(
        Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--unixsocket"])
            .arg(&socket)
            .arg("--dir")
            .arg(data.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server"),
    );
    let client = redis::Client::open(format!("redis+unix://{}", socket.display())).unwrap();
    let mut conn = eventually("the orphan to answer", Duration::from_secs(2), async || {
        client.get_multiplexed_async_connection().await
    })
    .await;
    let _: () = redis::cmd("SET")
        .arg("mine")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();

    let (ok, stderr) = run_to_exit(data.path());
    assert!(!ok, "votegraph must not start a second Redis there");
    assert!(stderr.contains("already running"), "{stderr}");
    assert!(
        stderr.contains("redis-cli -s"),
        "says how to stop it: {stderr}"
    );
    // The orphan still serves on its socket, with its data.
    let kept: Option<String> = redis::cmd("GET")
        .arg("mine")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("1"));
    drop(orphan);
}

/// `votegraph set-role` run in `dir` with `args`, without any Redis
/// setting but those `args` give.
fn set_role_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_votegraph"))
        .arg("set-role")
        .args(args)
        .current_dir(dir)
        .env_remove("REDIS_URL")
        .env_remove("REDIS_SENTINELS")
        .env_remove("REDIS_MASTER_NAME")
        .env_remove("REDIS_CLUSTER_NODES")
        .env_remove("VOTEGRAPH_DATA_DIR")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

#[tokio::test]
async fn set_role_finds_the_redis_a_server_runs_in_its_data_directory() {
    // Deep enough that the server keeps its socket elsewhere.
    let parent = tempfile::Builder::new().prefix("vgd").tempdir().unwrap();
    let deep = parent.path().join("d".repeat(60)).join("e".repeat(40));
    let data = deep.join("data");
    std::fs::create_dir_all(&data).unwrap();
    assert!(!data.join("redis.sock").exists());
    let (child, address) = start_binary(&data).await;
    let server = Running { child, address };
    for name in ["alice", "bob"] {
        let query =
            format!("mutation {{ signUp(name: \"{name}\", password: \"password1\") {{ token }} }}");
        assert!(gql(&server.address, &query, None).await["errors"].is_null());
    }

    let data_dir = data.to_str().unwrap();
    for (args, said) in [
        (
            vec!["ALICE", "admin", "--data-dir", data_dir],
            "alice is now admin",
        ),
        // The default data directory, ./data.
        (vec!["bob", "moderator"], "bob is now moderator"),
    ] {
        let out = set_role_in(&deep, &args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), said);
    }
    let roles = "{ alice: node(id: \"user:alice\") { ... on User { role } } \
                 bob: node(id: \"user:bob\") { ... on User { role } } }";
    let data_back = gql(&server.address, roles, None).await;
    assert_eq!(
        data_back["data"],
        json!({ "alice": { "role": "ADMIN" }, "bob": { "role": "MODERATOR" } })
    );

    let mut server = server;
    stop_gracefully(&mut server.child, &data).await;
    for dir in [&deep, parent.path()] {
        let out = set_role_in(dir, &["alice", "member"]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains("start the server") && stderr.contains("REDIS_URL"),
            "says what to do: {stderr}"
        );
    }
}

/// Ctrl-C in a terminal signals its whole foreground process group: the
/// server and, unless it keeps it apart, its redis-server, which the drain
/// still needs.
#[tokio::test]
async fn ctrl_c_drains_then_stops_the_server_and_its_redis_without_a_warning() {
    use std::os::unix::process::CommandExt as _;
    let data = tempfile::Builder::new().prefix("vgd").tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("votegraph.log");
    let out = std::fs::File::create(&log).unwrap();
    let err = out.try_clone().unwrap();
    let (child, address) = start_binary_with(data.path(), |command| {
        command
            .process_group(0)
            .env("RUST_LOG", "info")
            .env("VOTEGRAPH_SHUTDOWN_GRACE_MS", "1000")
            .stdout(out)
            .stderr(err);
    })
    .await;
    let mut server = Running { child, address };
    let group = format!("-{}", server.child.id());
    let signalled = Command::new("kill")
        .args(["-INT", "--", &group])
        .status()
        .unwrap();
    assert!(signalled.success());
    // Draining: still serving, from Redis.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = gql(&server.address, "{ articleCount }", None).await;
    assert_eq!(
        answer["data"]["articleCount"], 0,
        "while draining: {answer}"
    );
    let stopped = poll_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || server.child.try_wait().unwrap().is_some(),
    )
    .await;
    assert!(stopped.is_ok(), "votegraph stopped on Ctrl-C");
    assert!(server.child.wait().unwrap().success());
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("shutting down") && said.contains("local redis-server stopped"),
        "{said}"
    );
    let warnings: Vec<&str> = said.lines().filter(|l| l.contains(" WARN ")).collect();
    assert!(
        warnings.is_empty(),
        "a clean stop warns of nothing: {warnings:#?}"
    );
    assert_eq!(
        redis_processes_in(data.path()),
        0,
        "its redis-server stopped"
    );
}

#[test]
fn every_flag_is_in_the_configuration_docs_table() {
    use clap::CommandFactory;
    let docs = include_str!("../../docs/configuration.md");
    let command = votegraph::config::Settings::command();
    let mut flags = 0;
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if ["help", "version"].contains(&long) {
            continue;
        }
        let env = arg
            .get_env()
            .and_then(|e| e.to_str())
            .unwrap_or_else(|| panic!("--{long} has no environment variable"));
        let row = format!("| `--{long}` | `{env}` |");
        assert!(
            docs.contains(&row),
            "docs/configuration.md's flag table lacks {row}"
        );
        flags += 1;
    }
    assert!(flags > 40, "{flags}");
}

#[test]
fn the_readme_example_scores_count_the_automatic_upvote() {
    let readme = include_str!("../../README.md");
    let posted_at = readme
        .split("\"postedAt\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("an example postedAt");
    let time = chrono::DateTime::parse_from_rfc3339(posted_at).unwrap();
    let time = time.timestamp() as f64 + f64::from(time.timestamp_subsec_micros()) / 1e6;
    let scores: Vec<f64> = readme
        .split("\"score\":")
        .skip(1)
        .filter_map(|rest| rest.split([',', '}']).next()?.parse().ok())
        .collect();
    assert!(scores.len() >= 3, "{scores:?}");
    for score in scores {
        // Posting counts the poster's own upvote: time + 432.
        assert!((score - (time + 432.0)).abs() < 0.01, "{score} vs {time}");
    }
}
