//! The HTTP limit: a minimal poem server answering every request with the
//! bytes and headers of votegraph's anonymous front page, so a cached page
//! can be set against what HTTP alone costs on the same machine and
//! connections.
//!
//! It runs as its own process (this binary, re-run with [`SERVE`]), so the
//! CPU it spends is measured apart from the bench's clients.

use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use poem::http::{HeaderName, HeaderValue};
use poem::listener::TcpListener;
use poem::{Response, Server};

use crate::load::page_query;
use crate::servers::{free_port, Proc};

/// The scenario's name.
pub const NAME: &str = "HTTP limit (poem, front page bytes)";

/// The hidden first argument that makes this binary the poem server.
pub const SERVE: &str = "__serve-http-limit";

/// Response headers not replayed: the server sets them per response.
const PER_RESPONSE: [&str; 5] = [
    "content-length",
    "date",
    "connection",
    "keep-alive",
    "transfer-encoding",
];

/// A running poem server; stopped when dropped.
pub struct Limit {
    pub proc: Proc,
    pub base: String,
}

/// Fetches the anonymous front page from votegraph at `base` (its body and
/// headers, uncompressed), and starts a poem server answering with them.
pub async fn start(base: &str, dir: &std::path::Path) -> anyhow::Result<Limit> {
    let response = reqwest::Client::new()
        .post(format!("{base}/graphql"))
        .header("content-type", "application/json")
        .body(page_query(1))
        .send()
        .await?
        .error_for_status()?;
    let mut args = vec![];
    for (name, value) in response.headers() {
        if !PER_RESPONSE.contains(&name.as_str()) {
            args.push(name.as_str().to_owned());
            args.push(
                value
                    .to_str()
                    .context("a header that is not text")?
                    .to_owned(),
            );
        }
    }
    let body = response.bytes().await?;
    let body_file = dir.join("front-page.json");
    std::fs::write(&body_file, &body)?;
    let port = free_port()?;
    let proc = Proc(
        Command::new(std::env::current_exe()?)
            .arg(SERVE)
            .arg(port.to_string())
            .arg(&body_file)
            .args(&args)
            .stdout(Stdio::null())
            .spawn()
            .context("starting the HTTP-limit server")?,
    );
    let base = format!("http://127.0.0.1:{port}");
    crate::servers::wait_healthy(&base, "the HTTP-limit server").await?;
    Ok(Limit { proc, base })
}

/// The server process: `SERVE PORT BODY_FILE [HEADER VALUE]...`.
pub fn serve(args: &[String]) -> anyhow::Result<()> {
    let [port, body_file, headers @ ..] = args else {
        bail!("usage: {SERVE} PORT BODY_FILE [HEADER VALUE]...");
    };
    let body = bytes::Bytes::from(std::fs::read(body_file)?);
    let mut pairs = Vec::new();
    for pair in headers.chunks(2) {
        let [name, value] = pair else {
            bail!("a header without a value: {pair:?}");
        };
        pairs.push((
            HeaderName::try_from(name.as_str())?,
            HeaderValue::try_from(value.as_str())?,
        ));
    }
    let answer = poem::endpoint::make_sync(move |_| {
        let mut response = Response::builder();
        for (name, value) in &pairs {
            response = response.header(name.clone(), value.clone());
        }
        response.body(body.clone())
    });
    let listener = TcpListener::bind(format!("127.0.0.1:{port}"));
    tokio::runtime::Runtime::new()?.block_on(Server::new(listener).run(answer))?;
    Ok(())
}
