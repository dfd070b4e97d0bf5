//! Time in tests: the wall clock as Unix seconds, and waiting for what the
//! server does in the background ([`eventually`]).

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Now, in Unix seconds (as the server and the book store times).
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// How often [`eventually`] looks again.
pub const POLL: Duration = Duration::from_millis(20);

/// Calls `check` every [`POLL`] until it answers `Ok`, and returns what it
/// carries; after `timeout`, fails the test with `what` (what was awaited)
/// and the last `Err` (what was seen instead).
pub async fn eventually<T, O, Fut>(what: &str, timeout: Duration, check: impl FnMut() -> Fut) -> T
where
    O: Debug,
    Fut: Future<Output = Result<T, O>>,
{
    eventually_every(what, timeout, POLL, check).await
}

/// [`eventually`], looking again every `every` (for checks that cost more,
/// or loops that always looked at their own pace).
pub async fn eventually_every<T, O, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    check: impl FnMut() -> Fut,
) -> T
where
    O: Debug,
    Fut: Future<Output = Result<T, O>>,
{
    match poll_until(timeout, every, check).await {
        Ok(done) => done,
        Err(seen) => panic!("waited {timeout:?} for {what}; last saw {seen:?}"),
    }
}

/// Calls `check` every `every` until it answers `Ok`, for at most
/// `timeout`: that `Ok`, or the last `Err` (for waits that go on either way).
pub async fn poll_until<T, O, Fut>(
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Fut,
) -> Result<T, O>
where
    Fut: Future<Output = Result<T, O>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(done) => return Ok(done),
            Err(seen) if Instant::now() >= deadline => return Err(seen),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}
