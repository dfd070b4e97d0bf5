//! GraphiQL in a real headless Chromium, driven over the DevTools protocol:
//! the page loads with no failed request (everything is served locally),
//! runs a query, and shows a subscription event after a vote.
//!
//! Needs Debian's `chromium` (scripts/test.sh installs it). Set
//! `VOTEGRAPH_SCREENSHOT=<file.png>` to keep a screenshot of the page.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::helpers::{eventually_every, needed, poll_until, spawn_app, Program};

type Sink = SplitSink<WebSocketStream<MaybeTlsStream<TcpStream>>, Message>;

struct Chromium {
    child: Child,
    _profile: tempfile::TempDir,
    ws_url: String,
}

impl Chromium {
    async fn start(program: &str) -> Self {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(program)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                "--no-first-run",
                "--window-size=1400,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium must be installed for the GraphiQL test (apt-get install chromium)");
        let port_file = profile.path().join("DevToolsActivePort");
        // Owned at once, so Drop reaps the process even if start-up fails.
        let mut chromium = Self {
            child,
            _profile: profile,
            ws_url: String::new(),
        };
        chromium.ws_url = eventually_every(
            "chromium to open its DevTools port",
            Duration::from_secs(15),
            Duration::from_millis(50),
            async || {
                let text = std::fs::read_to_string(&port_file).ok()?;
                let mut lines = text.lines();
                let (port, path) = (lines.next()?, lines.next()?);
                Some(format!("ws://127.0.0.1:{port}{path}"))
            },
        )
        .await;
        chromium
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal DevTools protocol client: numbered calls, recorded events.
struct Cdp {
    sink: tokio::sync::Mutex<Sink>,
    next_id: AtomicU64,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>,
    events: Arc<Mutex<Vec<Value>>>,
    session: Mutex<Option<String>>,
}

impl Cdp {
    async fn connect(url: &str) -> Self {
        let (socket, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("devtools");
        let (sink, mut stream) = socket.split();
        let pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>> = Arc::default();
        let events: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (p, e) = (pending.clone(), events.clone());
        tokio::spawn(async move {
            while let Some(Ok(Message::Text(text))) = stream.next().await {
                let message: Value = serde_json::from_str(&text).unwrap();
                match message["id"].as_u64() {
                    Some(id) => {
                        if let Some(tx) = p.lock().unwrap().remove(&id) {
                            let _ = tx.send(message);
                        }
                    }
                    None => e.lock().unwrap().push(message),
                }
            }
        });
        Self {
            sink: tokio::sync::Mutex::new(sink),
            next_id: AtomicU64::new(1),
            pending,
            events,
            session: Mutex::new(None),
        }
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = self.session.lock().unwrap().clone() {
            message["sessionId"] = json!(session);
        }
        self.sink
            .lock()
            .await
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .unwrap_or_else(|_| panic!("{method} timed out"))
            .unwrap();
        assert!(reply.get("error").is_none(), "{method}: {reply}");
        reply["result"].clone()
    }

    async fn eval(&self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await;
        result["result"]["value"].clone()
    }

    /// Polls `expression` until it is truthy, for at most `within`.
    async fn poll(&self, expression: &str, within: Duration) -> Option<Value> {
        poll_until(within, Duration::from_millis(100), async || {
            let value = self.eval(expression).await;
            if value.is_null() || value == json!(false) || value == json!("") {
                Err(value)
            } else {
                Ok(value)
            }
        })
        .await
        .ok()
    }

    /// Polls `expression` until it is truthy; fails after 30 s.
    async fn wait_for(&self, expression: &str, what: &str) -> Value {
        match self.poll(expression, Duration::from_secs(30)).await {
            Some(value) => value,
            None => panic!("timed out waiting for {what}"),
        }
    }

    fn events(&self, method: &str) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["method"] == method)
            .cloned()
            .collect()
    }
}

const RESULT_TEXT: &str = "((document.querySelector('.result-window') || {}).innerText || '')";
const EXECUTE: &str = "(() => { const b = document.querySelector('.graphiql-execute-button'); if (b) b.click(); return !!b; })()";

fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn graphiql_works_offline_in_chromium() {
    let Some(program) = needed("graphiql_works_offline_in_chromium", Program::Chromium) else {
        return;
    };
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "Shown in GraphiQL", &["demo"]).await;

    let chromium = Chromium::start(&program).await;
    let cdp = Cdp::connect(&chromium.ws_url).await;
    let target = cdp
        .call("Target.createTarget", json!({ "url": "about:blank" }))
        .await;
    let attached = cdp
        .call(
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        )
        .await;
    *cdp.session.lock().unwrap() = Some(attached["sessionId"].as_str().unwrap().to_owned());
    for domain in ["Network.enable", "Page.enable", "Runtime.enable"] {
        cdp.call(domain, json!({})).await;
    }

    // 1. A query.
    let query = "{ articles { title votes } }";
    cdp.call(
        "Page.navigate",
        json!({ "url": format!("{}/?query={}", app.address, encode(query)) }),
    )
    .await;
    cdp.wait_for(
        "!!document.querySelector('.graphiql-execute-button')",
        "GraphiQL to render",
    )
    .await;
    // The button can exist before GraphiQL is ready to run, and a click then
    // is lost: click again until the result shows (re-running a query is
    // harmless).
    let wanted = format!("{RESULT_TEXT}.includes('Shown in GraphiQL') && {RESULT_TEXT}");
    let mut text = Value::Null;
    for _ in 0..30 {
        cdp.eval(EXECUTE).await;
        if let Some(shown) = cdp.poll(&wanted, Duration::from_secs(1)).await {
            text = shown;
            break;
        }
    }
    assert!(text.is_string(), "the query result never showed");
    assert!(text.as_str().unwrap().contains("\"votes\": 1"), "{text}");

    // 2. A subscription, then a vote from outside the browser.
    let subscription = "subscription { scoreChanged { votes article { title } } }";
    cdp.call(
        "Page.navigate",
        json!({ "url": format!("{}/?query={}", app.address, encode(subscription)) }),
    )
    .await;
    cdp.wait_for(
        "!!document.querySelector('.graphiql-execute-button')",
        "GraphiQL to render again",
    )
    .await;
    // As above; a click only while nothing is subscribed, as a second click
    // on a running subscription would stop it.
    let mut subscribed = false;
    'clicks: for _ in 0..30 {
        cdp.eval(EXECUTE).await;
        for _ in 0..10 {
            if app.subscriptions().await >= 1 {
                subscribed = true;
                break 'clicks;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(
        subscribed,
        "GraphiQL opened a subscription over the WebSocket"
    );
    app.vote(&bob, "1").await;
    let text = cdp
        .wait_for(
            &format!("{RESULT_TEXT}.includes('\"votes\": 2') && {RESULT_TEXT}"),
            "the subscription event",
        )
        .await;
    assert!(
        text.as_str().unwrap().contains("Shown in GraphiQL"),
        "{text}"
    );

    if let Ok(path) = std::env::var("VOTEGRAPH_SCREENSHOT") {
        let shot = cdp
            .call("Page.captureScreenshot", json!({ "format": "png" }))
            .await;
        let png = base64_decode(shot["data"].as_str().unwrap());
        std::fs::write(path, png).unwrap();
    }

    // Everything came from votegraph: no failed request, nothing off-host.
    let failed = cdp.events("Network.loadingFailed");
    assert!(failed.is_empty(), "failed requests: {failed:?}");
    for response in cdp.events("Network.responseReceived") {
        let url = response["params"]["response"]["url"]
            .as_str()
            .unwrap_or_default();
        let status = response["params"]["response"]["status"]
            .as_i64()
            .unwrap_or_default();
        assert!(
            url.starts_with(&app.address) || url.starts_with("data:"),
            "off-host request: {url}"
        );
        assert!(status < 400, "{url} answered {status}");
    }
    let exceptions = cdp.events("Runtime.exceptionThrown");
    assert!(exceptions.is_empty(), "page errors: {exceptions:?}");
}

fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut buffer, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        let value = ALPHABET.iter().position(|&a| a == c).expect("base64") as u32;
        buffer = (buffer << 6) | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    out
}
