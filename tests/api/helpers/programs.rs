//! Programs beside redis-server that some tests drive: Chromium, nginx,
//! HAProxy, Node, and Python with Prometheus' parser or the book's
//! redis-py. A test whose program is missing prints one `SKIPPED` line
//! and passes, so `cargo test` with only redis-server installed passes and
//! says what it left out. `scripts/test.sh` installs them all and sets
//! `VOTEGRAPH_TEST_REQUIRE_ALL=1`, under which a missing one fails.

use std::process::{Command, Stdio};

/// A program some tests need, and the script that installs it.
#[derive(Clone, Copy, Debug)]
pub enum Program {
    Chromium,
    Nginx,
    Haproxy,
    Node,
    /// `python3` with `prometheus_client`.
    PrometheusParser,
    /// `python3`, which runs the book's code (its redis-py comes with it).
    Python,
}

impl Program {
    fn installer(self) -> &'static str {
        match self {
            Program::Chromium => "scripts/ensure-chromium.sh",
            Program::Nginx => "scripts/ensure-nginx.sh",
            Program::Haproxy => "scripts/ensure-haproxy.sh",
            Program::Node => "apt-get install nodejs npm",
            Program::PrometheusParser => "scripts/ensure-prometheus-client.sh",
            Program::Python => "scripts/ensure-book-python.sh",
        }
    }

    /// How to run it, when it is there.
    pub fn found(self) -> Option<String> {
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
        let python = python();
        let candidates: Vec<(String, Vec<&str>)> = match self {
            Program::Chromium => vec![(chromium, vec!["--version"])],
            Program::Nginx => ["nginx", "/usr/sbin/nginx"]
                .map(|p| (p.to_owned(), vec!["-v"]))
                .into(),
            Program::Haproxy => ["haproxy", "/usr/sbin/haproxy"]
                .map(|p| (p.to_owned(), vec!["-v"]))
                .into(),
            Program::Node => vec![("npm".to_owned(), vec!["--version"])],
            Program::PrometheusParser => vec![(python, vec!["-c", "import prometheus_client"])],
            Program::Python => vec![(python, vec!["--version"])],
        };
        candidates
            .into_iter()
            .find(|(program, args)| runs(program, args))
            .map(|(program, _)| program)
    }
}

/// The Python the tests run (`PYTHON`, or `python3`).
pub fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `program` for `test`, or None after one `SKIPPED` line; fails instead
/// under `VOTEGRAPH_TEST_REQUIRE_ALL=1`.
pub fn needed(test: &str, program: Program) -> Option<String> {
    if let Some(found) = program.found() {
        return Some(found);
    }
    let install = program.installer();
    assert!(
        std::env::var_os("VOTEGRAPH_TEST_REQUIRE_ALL").is_none(),
        "{test} needs {program:?}, which is missing ({install} installs it)"
    );
    eprintln!("SKIPPED {test}: {program:?} is not installed ({install} installs it)");
    None
}
