//! The Node peer: a Fastify + Mercurius server (`bench/peer/server.js`)
//! serving the same front-page query from the same Redis, measured in the
//! same run, so votegraph is compared with the fastest thing a Node team
//! would write, not only with the raw-Redis floor.
//!
//! The peer's files are compiled into the bench, so the binary needs no
//! source tree. They are installed with `npm ci` into a cache folder named
//! after the hash of `package.json` and `package-lock.json` and reused while
//! those stay the same: `$XDG_CACHE_HOME/votegraph-bench/peer-<hash>`, or
//! `~/.cache/…` without it, or the temporary directory without a home.
//! Without `node` or `npm`, or when the install fails, the bench says why in
//! one line and carries on without the peer.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::load::{self, logged_in_page_query, page_query, Gql, Stats};

/// The peer's scenarios: the logged-in front page (the comparison that
/// counts, since votegraph's logged-in path has no response cache either)
/// and the anonymous front page without votegraph's response cache.
pub const LOGGED_IN: &str = "front page, logged in, Node peer";
pub const UNCACHED: &str = "front page, uncached, Node peer";

const PACKAGE_JSON: &str = include_str!("../peer/package.json");
const PACKAGE_LOCK: &str = include_str!("../peer/package-lock.json");
const SERVER_JS: &str = include_str!("../peer/server.js");

/// Written into the install folder after `npm ci` succeeded, so a folder
/// left half-installed by an interrupted run is never used.
const INSTALLED_MARKER: &str = ".votegraph-bench-installed";
/// The oldest Node the pinned Mercurius supports.
const MIN_NODE_MAJOR: u32 = 20;
/// How long `npm ci` may take (a cold install downloads about 5 MB).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the peer may take to answer its health check after spawning.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// An installed peer, ready to start.
pub struct Installed {
    dir: PathBuf,
    node: String,
    /// `node --version`, for the report.
    pub node_version: String,
}

impl Installed {
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The pinned package versions, for the report.
pub fn packages() -> Value {
    serde_json::from_str::<Value>(PACKAGE_JSON)
        .map(|p| p["dependencies"].clone())
        .unwrap_or(Value::Null)
}

/// Runs `program --version`, answering its output.
async fn version(program: &str) -> Result<String, String> {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(program)
            .arg("--version")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| format!("`{program} --version` did not answer within 30 s"))?
    .map_err(|e| format!("`{program}` not found ({e})"))?;
    if !out.status.success() {
        return Err(format!("`{program} --version` failed ({})", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Where installs are cached: `$XDG_CACHE_HOME`, `~/.cache`, or the
/// temporary directory.
fn cache_root() -> PathBuf {
    let xdg = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .map(|h| h.join(".cache"));
    xdg.or(home)
        .unwrap_or_else(std::env::temp_dir)
        .join("votegraph-bench")
}

/// The install folder's name: the package files' hash, so a changed
/// dependency gets a fresh install and an unchanged one is reused.
fn install_name() -> String {
    let mut hash = Sha256::new();
    hash.update(PACKAGE_JSON.as_bytes());
    hash.update([0]);
    hash.update(PACKAGE_LOCK.as_bytes());
    format!("peer-{}", &hex::encode(hash.finalize())[..16])
}

/// Writes `contents` to `path` through a temporary file and a rename, so a
/// concurrent bench never reads half a file.
fn write_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

/// Checks for Node and npm and installs the peer's dependencies, unless a
/// previous run did. The error is the reason to skip the peer.
pub async fn install(node: &str, npm: &str) -> Result<Installed, String> {
    let node_version = version(node).await?;
    let major = node_version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    if major.is_none_or(|m| m < MIN_NODE_MAJOR) {
        return Err(format!(
            "Node {node_version} is older than the {MIN_NODE_MAJOR} the peer needs"
        ));
    }
    version(npm).await?;
    let root = cache_root();
    let dir = root.join(install_name());
    if !dir.join(INSTALLED_MARKER).exists() {
        install_into(npm, &root, &dir).await?;
    }
    // The server itself is not part of the hash: it is rewritten every run,
    // so an edited `server.js` takes effect without a new install.
    write_atomically(&dir.join("server.js"), SERVER_JS)
        .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    Ok(Installed {
        dir,
        node: node.to_owned(),
        node_version,
    })
}

/// Runs `npm ci` in a staging folder and renames it into place: two benches
/// installing at once both succeed, and the second one's copy is dropped.
async fn install_into(npm: &str, root: &Path, dir: &Path) -> Result<(), String> {
    let staging = root.join(format!("{}.tmp-{}", install_name(), std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let prepared = std::fs::create_dir_all(&staging).and_then(|()| {
        std::fs::write(staging.join("package.json"), PACKAGE_JSON)?;
        std::fs::write(staging.join("package-lock.json"), PACKAGE_LOCK)?;
        std::fs::write(staging.join("server.js"), SERVER_JS)
    });
    if let Err(e) = prepared {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(format!("cannot write {}: {e}", staging.display()));
    }
    eprintln!(
        "installing the Node peer with npm ci into {}",
        dir.display()
    );
    let run = tokio::process::Command::new(npm)
        .args([
            "ci",
            "--omit=dev",
            "--prefer-offline",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .current_dir(&staging)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let outcome = match tokio::time::timeout(INSTALL_TIMEOUT, run).await {
        Err(_) => Err(format!(
            "npm ci took longer than {} s",
            INSTALL_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("cannot run npm ci ({e})")),
        Ok(Ok(out)) if !out.status.success() => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            Err(format!(
                "npm ci failed ({}): {}",
                out.status,
                last.unwrap_or("no message")
            ))
        }
        Ok(Ok(_)) => std::fs::write(staging.join(INSTALLED_MARKER), b"")
            .map_err(|e| format!("cannot write {}: {e}", staging.display())),
    };
    if let Err(reason) = outcome {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(reason);
    }
    if std::fs::rename(&staging, dir).is_err() {
        // Another bench finished first (or a broken folder is in the way).
        let _ = std::fs::remove_dir_all(&staging);
        if !dir.join(INSTALLED_MARKER).exists() {
            return Err(format!(
                "{} exists but holds no finished install; remove it",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// A running peer; stopped (killed and reaped) when dropped, on every path.
pub struct Peer {
    child: Child,
    /// Held open: the peer exits when it closes, so it dies with the bench
    /// even when the bench itself is killed.
    _stdin: Option<ChildStdin>,
    pub base: String,
}

impl Peer {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the peer on a free loopback port against `redis_addr` and waits
/// until it answers its health check.
pub async fn start(installed: &Installed, redis_addr: &str) -> Result<Peer, String> {
    let port = crate::servers::free_port().map_err(|e| format!("no free port: {e}"))?;
    let mut child = Command::new(&installed.node)
        // A larger young generation: the peer allocates a page's replies and
        // answer per request, and the default 16 MiB semi-space made it
        // spend about a sixth of its time collecting garbage (profiled);
        // 64 MiB cut its CPU per page by about a tenth.
        .arg("--max-semi-space-size=64")
        .arg("server.js")
        .current_dir(&installed.dir)
        .env("PEER_PORT", port.to_string())
        .env("PEER_REDIS_URL", format!("redis://{redis_addr}"))
        .env("NODE_ENV", "production")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start node: {e}"))?;
    let stdin = child.stdin.take();
    let mut peer = Peer {
        child,
        _stdin: stdin,
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| format!("http client: {e}"))?;
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(status)) = peer.child.try_wait() {
            return Err(format!("the peer exited at start ({status})"));
        }
        if let Ok(r) = client.get(format!("{}/health", peer.base)).send().await {
            if r.status().is_success() {
                return Ok(peer);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "the peer did not answer within {} s",
        START_TIMEOUT.as_secs()
    ))
}

/// Fetches one GraphQL answer's `data`, failing on errors.
async fn fetch_data(
    client: &reqwest::Client,
    base: &str,
    body: &str,
    token: &str,
) -> Result<Value, String> {
    let response: Value = client
        .post(format!("{base}/graphql"))
        .header("content-type", "application/json")
        .bearer_auth(token)
        .body(body.to_owned())
        .send()
        .await
        .map_err(|e| format!("{base}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("{base}: {e}"))?;
    if !response["errors"].is_null() {
        return Err(format!("{base} answered errors: {}", response["errors"]));
    }
    Ok(response["data"].clone())
}

/// JSON equality with numbers compared by value: votegraph writes a whole
/// float as `1.0`, Node as `1`.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Keeps the comparison honest: the reader behind `token` first upvotes the
/// best-ranked open article on the page and downvotes the next one (through
/// votegraph), so `myVote` is not NONE everywhere; then one logged-in page
/// is fetched from both servers and their `data` must be the same. Answers
/// what was compared, or where the two differ.
pub async fn check(
    votegraph: &str,
    peer: &str,
    page_query: &str,
    token: &str,
    open: &[u64],
) -> Result<String, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("http client: {e}"))?;
    let before = fetch_data(&client, votegraph, page_query, token).await?;
    let open_on_page: Vec<u64> = before["articles"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["id"].as_str()?.parse::<u64>().ok())
        .filter(|id| open.contains(id))
        .take(2)
        .collect();
    for (id, direction) in open_on_page.iter().zip(["UP", "DOWN"]) {
        let vote = serde_json::json!({
            "query": format!("mutation {{ vote(articleId: \"{id}\", direction: {direction}) {{ id }} }}")
        });
        fetch_data(&client, votegraph, &vote.to_string(), token).await?;
    }
    let ours = fetch_data(&client, votegraph, page_query, token).await?;
    let theirs = fetch_data(&client, peer, page_query, token).await?;
    let (Some(a), Some(b)) = (ours["articles"].as_array(), theirs["articles"].as_array()) else {
        return Err(format!("no article list: votegraph {ours}, peer {theirs}"));
    };
    if a.len() != b.len() {
        return Err(format!(
            "votegraph listed {} articles, the peer {}",
            a.len(),
            b.len()
        ));
    }
    if let Some((x, y)) = a.iter().zip(b).find(|(x, y)| !same(x, y)) {
        return Err(format!("votegraph answered {x}, the peer {y}"));
    }
    if !same(&ours, &theirs) {
        return Err(format!("votegraph answered {ours}, the peer {theirs}"));
    }
    let votes = |v: &str| a.iter().filter(|x| x["myVote"] == v).count();
    Ok(format!(
        "identical logged-in pages ({} articles, myVote {} UP, {} DOWN)",
        a.len(),
        votes("UP"),
        votes("DOWN")
    ))
}

/// How the bench runs the peer.
pub struct Run<'a> {
    pub node: &'a str,
    pub npm: &'a str,
    pub redis_addr: &'a str,
    /// The votegraph (as shipped) the peer's answers are checked against.
    pub votegraph: &'a str,
    /// Articles open to voting, for the check's votes.
    pub open: &'a [u64],
    /// Readers the logged-in page cycles through, as for votegraph.
    pub users: usize,
    pub logged_in: bool,
    pub uncached: bool,
    pub connections: usize,
    pub warmup: Duration,
    pub duration: Duration,
}

/// Installs, starts, checks and measures the peer, pushing its scenarios
/// onto `results`. Answers the report for the JSON, and the reason when the
/// check found the peer's page different from votegraph's: the bench then
/// fails, since a comparison with a server answering something else would
/// mean nothing.
pub async fn measure(run: Run<'_>, results: &mut Vec<Stats>) -> (Value, Option<String>) {
    let skipped = |reason: String| {
        eprintln!("Node peer skipped: {reason}");
        (json!({ "status": "skipped", "reason": reason }), None)
    };
    let installed = match install(run.node, run.npm).await {
        Ok(installed) => installed,
        Err(reason) => return skipped(reason),
    };
    let peer = match start(&installed, run.redis_addr).await {
        Ok(peer) => peer,
        Err(reason) => return skipped(reason),
    };
    // The first load reader, whose page the logged-in scenarios also show.
    let token = crate::seed::token(0);
    let checked = match check(
        run.votegraph,
        &peer.base,
        &logged_in_page_query(),
        &token,
        run.open,
    )
    .await
    {
        Ok(checked) => checked,
        Err(why) => {
            eprintln!("Node peer check FAILED (not measured): {why}");
            let report = json!({ "status": "check failed", "reason": why });
            return (report, Some(why));
        }
    };
    eprintln!(
        "Node peer (Node {}, one process) checked: {checked}",
        installed.node_version
    );
    load::probe_server(Some(peer.pid()));
    let gql = Gql::new(&peer.base, run.connections);
    let (n, warmup, duration) = (run.connections, run.warmup, run.duration);
    if run.logged_in {
        results.push(
            crate::scenarios::logged_in(
                &gql,
                LOGGED_IN,
                crate::scenarios::Users::Seeded(run.users),
                n,
                warmup,
                duration,
            )
            .await,
        );
    }
    if run.uncached {
        results.push(
            crate::scenarios::fixed(&gql, UNCACHED, page_query(1), n, warmup, duration).await,
        );
    }
    drop(peer);
    load::probe_server(None);
    let report = json!({
        "status": "measured",
        "node": installed.node_version,
        "packages": packages(),
        "process": "one Node process (cluster mode off), one Redis connection",
        "install_dir": installed.dir().display().to_string(),
        "check": checked,
    });
    (report, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value() {
        let a: Value = serde_json::from_str(r#"{"s": 1.0, "l": [1, "x"]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"s": 1, "l": [1.0, "x"]}"#).unwrap();
        let c: Value = serde_json::from_str(r#"{"s": 1.5, "l": [1, "x"]}"#).unwrap();
        let d: Value = serde_json::from_str(r#"{"s": 1, "l": [1, "x"], "z": 0}"#).unwrap();
        assert!(same(&a, &b));
        assert!(!same(&a, &c));
        assert!(!same(&b, &d));
        assert!(!same(&d, &b));
    }
}
