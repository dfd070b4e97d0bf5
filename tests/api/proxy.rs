//! The reverse-proxy example (`deploy/nginx/votegraph.conf`, run by
//! `scripts/proxy.sh`) in front of a real server: TLS, a subscription over
//! `wss://`, client addresses through `X-Forwarded-For` with
//! `--trusted-proxies`, the request id across both, and nginx stopped on
//! every path.
//!
//! Needs nginx (scripts/test.sh installs it). Without it these tests say
//! so and pass, except in CI (`CI` set), where they fail.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{eventually_every, free_port, needed, spawn_app_with, Program};

/// Whether to run: nginx and Python (the WebSocket client) are there.
fn nginx_or_skip(test: &str) -> bool {
    needed(test, Program::Nginx).is_some() && needed(test, Program::Python).is_some()
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// `scripts/proxy.sh` in front of `upstream`; stopped with SIGTERM when
/// dropped, as an operator's Ctrl-C would.
struct Proxy {
    child: Child,
    https: u16,
    http: u16,
    dir: tempfile::TempDir,
}

impl Proxy {
    async fn start(upstream: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("vgp").tempdir().unwrap();
        let (https, http) = (free_port(), free_port());
        let child = Command::new(script("scripts/proxy.sh"))
            .env("PROXY_DIR", dir.path())
            .env("PROXY_HTTPS", format!("127.0.0.1:{https}"))
            .env("PROXY_HTTP", format!("127.0.0.1:{http}"))
            .env("UPSTREAM", upstream)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("scripts/proxy.sh");
        let mut proxy = Self {
            child,
            https,
            http,
            dir,
        };
        let what = format!("nginx to listen on {https}");
        eventually_every(
            &what,
            Duration::from_secs(10),
            Duration::from_millis(50),
            async || {
                if std::net::TcpStream::connect(("127.0.0.1", https)).is_ok() {
                    return true;
                }
                if let Ok(Some(status)) = proxy.child.try_wait() {
                    panic!("proxy.sh exited ({status}): {}", proxy.stderr());
                }
                false
            },
        )
        .await;
        proxy
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
        }
        text
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.https)
    }

    /// nginx's master process, from its pid file.
    fn nginx_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.path().join("nginx.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Stops the script as Ctrl-C would; true when it exited in time.
    fn stop(&mut self) -> bool {
        if let Ok(Some(_)) = self.child.try_wait() {
            return true;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let nginx = self.nginx_pid();
        if !self.stop() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Whatever happened to the script, its nginx goes too.
        if let Some(pid) = nginx.filter(|pid| alive(*pid)) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// The Python subscriber; killed if the test ends before it does.
struct Subscriber(Child);

impl Subscriber {
    /// Its next JSON line, or its stderr as the failure.
    fn line(&mut self, lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Value {
        match lines.next().and_then(Result::ok) {
            Some(line) => serde_json::from_str(&line).unwrap(),
            None => {
                let _ = self.0.kill();
                let mut text = String::new();
                if let Some(mut err) = self.0.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut err, &mut text);
                }
                panic!("the subscriber failed: {text}")
            }
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn python() -> String {
    crate::helpers::python()
}

fn client_script() -> PathBuf {
    script("tests/api/proxy_client.py")
}

/// One HTTPS request through the proxy from `source` (a loopback address).
fn https(proxy: &Proxy, source: &str, path: &str, body: Option<Value>, headers: &[&str]) -> Value {
    let mut command = Command::new(python());
    command
        .arg(client_script())
        .args(["request", &proxy.url(path), "--source", source, "--cacert"])
        .arg(proxy.cert());
    for header in headers {
        command.args(["--header", header]);
    }
    if let Some(body) = body {
        command.args(["--body", &body.to_string()]);
    }
    let out = command.output().expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn gql_through(proxy: &Proxy, source: &str, query: &str, token: Option<&str>) -> Value {
    let auth = token.map(|t| format!("authorization:Bearer {t}"));
    let headers: Vec<&str> = auth.iter().map(String::as_str).collect();
    let response = https(
        proxy,
        source,
        "/graphql",
        Some(json!({ "query": query })),
        &headers,
    );
    assert_eq!(response["status"], 200, "{response}");
    serde_json::from_str(response["body"].as_str().unwrap()).unwrap()
}

fn sign_up(proxy: &Proxy, source: &str, name: &str) -> Value {
    gql_through(
        proxy,
        source,
        &format!("mutation {{ signUp(name: \"{name}\", password: \"password-1\") {{ token }} }}"),
        None,
    )
}

// Several threads: the server runs in this process while the test waits
// for the Python client's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_nginx_example_serves_tls_websockets_and_real_client_addresses() {
    if !nginx_or_skip("the_nginx_example_serves_tls_websockets_and_real_client_addresses") {
        return;
    }
    let app = spawn_app_with(|settings| {
        settings.trusted_proxies = "127.0.0.1".parse().unwrap();
        settings.rate_sign_up = "1/3600".parse().unwrap();
    })
    .await;
    let mut proxy = Proxy::start(app.address.trim_start_matches("http://")).await;

    // TLS, with the client's request id passed through both ways.
    let answer = https(
        &proxy,
        "127.0.0.1",
        "/graphql",
        Some(json!({ "query": "{ articleCount }" })),
        &["x-request-id:through-nginx-1"],
    );
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["body"], r#"{"data":{"articleCount":0}}"#);
    assert_eq!(answer["headers"]["x-request-id"], "through-nginx-1");
    // Without one, nginx's own id reaches votegraph and comes back.
    let answer = https(&proxy, "127.0.0.1", "/health", None, &[]);
    let id = answer["headers"]["x-request-id"].as_str().unwrap();
    assert_eq!(id.len(), 32, "nginx's $request_id: {id}");

    // Each client behind the proxy has its own budget (one sign-up an
    // hour), and a client cannot claim another address by sending its own
    // X-Forwarded-For: nginx appends the real one, which votegraph reads.
    let alice = sign_up(&proxy, "127.0.0.2", "alice");
    let alice = alice["data"]["signUp"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let again = sign_up(&proxy, "127.0.0.2", "alice2");
    assert_eq!(
        crate::helpers::error_code(&again),
        "RATE_LIMITED",
        "{again}"
    );
    let spoofed = https(
        &proxy,
        "127.0.0.2",
        "/graphql",
        Some(
            json!({ "query": "mutation { signUp(name: \"alice3\", password: \"password-1\") { token } }" }),
        ),
        &["x-forwarded-for:198.51.100.7"],
    );
    let spoofed: Value = serde_json::from_str(spoofed["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        crate::helpers::error_code(&spoofed),
        "RATE_LIMITED",
        "{spoofed}"
    );
    let bob = sign_up(&proxy, "127.0.0.3", "bob");
    let bob = bob["data"]["signUp"]["token"].as_str().unwrap().to_owned();

    // Metrics stay private; plain HTTP is sent to HTTPS.
    let metrics = https(&proxy, "127.0.0.1", "/metrics", None, &[]);
    assert_eq!(metrics["status"], 404);
    assert!(metrics["body"].as_str().unwrap().contains("NOT_FOUND"));
    let redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{}/graphql", proxy.http))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), 301);
    assert!(redirect.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("https://"));

    // A subscription over wss:// hears a vote made through the proxy.
    let posted = gql_through(
        &proxy,
        "127.0.0.2",
        "mutation { post(title: \"through nginx\", link: \"https://e.com\") { id } }",
        Some(&alice),
    );
    let id = posted["data"]["post"]["id"].as_str().unwrap().to_owned();
    let mut subscriber = Subscriber(
        Command::new(python())
            .arg(client_script())
            .args(["subscribe", &proxy.url("/graphql"), "--source", "127.0.0.4"])
            .arg("--cacert")
            .arg(proxy.cert())
            .args(["--header", "x-request-id:ws-through-nginx"])
            .args([
                "--query",
                "subscription { scoreChanged { votes article { id } } }",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3"),
    );
    let mut lines = BufReader::new(subscriber.0.stdout.take().unwrap()).lines();
    let ready = subscriber.line(&mut lines);
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["request_id"], "ws-through-nginx");
    let voted = gql_through(
        &proxy,
        "127.0.0.3",
        &format!("mutation {{ vote(articleId: \"{id}\") {{ votes }} }}"),
        Some(&bob),
    );
    assert_eq!(voted["data"]["vote"]["votes"], 2, "{voted}");
    let event = subscriber.line(&mut lines);
    assert!(subscriber.0.wait().unwrap().success());
    assert_eq!(event["type"], "next", "{event}");
    assert_eq!(event["payload"]["data"]["scoreChanged"]["votes"], 2);
    assert_eq!(
        event["payload"]["data"]["scoreChanged"]["article"]["id"],
        id
    );

    // Ctrl-C (SIGTERM) stops nginx with the script.
    let nginx = proxy.nginx_pid().expect("nginx wrote its pid");
    assert!(alive(nginx));
    assert!(proxy.stop(), "proxy.sh stopped on SIGTERM");
    assert!(!alive(nginx), "nginx stopped with it");
}

#[tokio::test]
async fn the_proxy_script_fails_cleanly_when_its_port_is_taken() {
    if !nginx_or_skip("the_proxy_script_fails_cleanly_when_its_port_is_taken") {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::Builder::new().prefix("vgp").tempdir().unwrap();
    let out = Command::new(script("scripts/proxy.sh"))
        .env("PROXY_DIR", dir.path())
        .env("PROXY_HTTPS", format!("127.0.0.1:{port}"))
        .env("PROXY_HTTP", format!("127.0.0.1:{}", free_port()))
        .env("UPSTREAM", "127.0.0.1:9")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("Address already in use"), "{stderr}");
    // Nothing left running: no nginx with this directory's pid file.
    if let Some(pid) = std::fs::read_to_string(dir.path().join("nginx.pid"))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    {
        assert!(!alive(pid), "nginx {pid} left running");
    }
}
