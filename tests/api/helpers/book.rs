//! The book's own Python code (`tests/book/`), run unmodified against a
//! test's Redis: each call is one `python3 tests/book/book.py` process
//! calling one function of *Redis in Action*'s chapter 1 (or its
//! downvote exercise), with redis-py 2.x as the book's code expects.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::redis::TestRedis;

/// The book's code, pointed at one Redis.
pub struct Book {
    socket: PathBuf,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Installs redis-py 2.x once per test run (a no-op when it is there).
fn ensure_python() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let status = std::process::Command::new("bash")
            .arg(repo().join("scripts/ensure-book-python.sh"))
            .status()
            .expect("run scripts/ensure-book-python.sh");
        assert!(status.success(), "scripts/ensure-book-python.sh failed");
    });
}

impl Book {
    pub fn on(redis: &TestRedis) -> Self {
        ensure_python();
        Self {
            socket: redis.socket(),
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(super::programs::python());
        command
            .arg(repo().join("tests/book/book.py"))
            .arg("--socket")
            .arg(&self.socket)
            .kill_on_drop(true);
        command
    }

    /// Runs one book function (`post`, `vote`, `groups`…, see book.py) and
    /// answers what it returned.
    pub async fn call(&self, args: &[&str]) -> Value {
        let out = self.command().args(args).output().await.expect("python3");
        assert!(
            out.status.success(),
            "book.py {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("book.py prints JSON")
    }

    /// Runs several book functions in one process, one after the other
    /// (as fast as the book's code goes), and answers what each returned.
    pub async fn batch(&self, calls: &[Vec<String>]) -> Vec<Value> {
        let mut child = self
            .command()
            .arg("batch")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut input = String::new();
        for call in calls {
            input.push_str(&serde_json::to_string(call).unwrap());
            input.push('\n');
        }
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).await.unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.expect("book.py batch");
        assert!(
            out.status.success(),
            "book.py batch: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).expect("book.py prints JSON"))
            .collect()
    }

    /// Like [`Book::call`], for a call the book's code may fail: its
    /// answer, or its error message.
    pub async fn try_call(&self, args: &[&str]) -> Result<Value, String> {
        let out = self.command().args(args).output().await.expect("python3");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(serde_json::from_slice(&out.stdout).expect("book.py prints JSON"))
    }

    /// `post_article(conn, user, title, link)`: the new id.
    pub async fn post(&self, user: &str, title: &str) -> String {
        let id = self
            .call(&["post", user, title, "https://example.com/"])
            .await;
        id.as_str().expect("an id").to_owned()
    }

    /// `article_vote(conn, user, 'article:<id>')`.
    pub async fn vote(&self, user: &str, id: &str) {
        self.call(&["vote", user, &format!("article:{id}")]).await;
    }

    /// The exercise's downvote.
    pub async fn downvote(&self, user: &str, id: &str) {
        self.call(&["downvote", user, &format!("article:{id}")])
            .await;
    }

    /// The exercise's switch (an upvote becomes a downvote and back).
    pub async fn switch(&self, user: &str, id: &str) {
        self.call(&["switch", user, &format!("article:{id}")]).await;
    }

    /// `add_remove_groups(conn, id, add, remove)`.
    pub async fn groups(&self, id: &str, add: &[&str], remove: &[&str]) {
        let mut args = vec!["groups", id, "--add"];
        args.extend(add);
        args.push("--remove");
        args.extend(remove);
        self.call(&args).await;
    }

    /// Runs the book's own unittest (seed 002's, ported to Python 3) on
    /// this Redis; answers whether it passed, with its output.
    pub async fn unittest(&self) -> (bool, String) {
        let out = Command::new(super::programs::python())
            .arg(repo().join("tests/book/ch01_unittest.py"))
            .env("BOOK_REDIS_SOCKET", &self.socket)
            .env("BOOK_REDIS_DB", "0")
            .kill_on_drop(true)
            .output()
            .await
            .expect("python3");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}
