//! The `votegraph` binary itself, as the README's first command runs it.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::spawn_app;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the binary with its own redis-server in `data`; returns it and its address.
async fn start_binary(data: &std::path::Path) -> (std::process::Child, String) {
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_votegraph"))
        .env_remove("REDIS_URL")
        .env("VOTEGRAPH_BIND", format!("127.0.0.1:{port}"))
        .env("VOTEGRAPH_DATA_DIR", data)
        .env("VOTEGRAPH_ARGON2_MEMORY_KIB", "1024")
        .env("VOTEGRAPH_ARGON2_ITERATIONS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let address = format!("http://127.0.0.1:{port}");
    for _ in 0..200 {
        if let Ok(r) = reqwest::get(format!("{address}/health")).await {
            if r.status() == 200 {
                return (child, address);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
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
    let mut stopped = false;
    for _ in 0..200 {
        if server.try_wait().unwrap().is_some() {
            stopped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    let app = crate::helpers::spawn_app_with(crate::helpers::TestRedis::start().await, |redis| {
        let mut settings = crate::helpers::test_settings(redis);
        settings.cors_origins = vec!["https://app.example".into()];
        settings
    })
    .await;
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
