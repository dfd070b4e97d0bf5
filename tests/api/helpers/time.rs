//! Time in tests: the wall clock as Unix seconds, and waiting for what the
//! server does in the background ([`eventually`]).

use std::fmt::Debug;
use std::ops::AsyncFnMut;
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

/// What a check answers [`eventually`]: done, or not yet and what it saw.
pub trait Outcome {
    /// What a check that holds gives the waiter.
    type Done;
    /// What a check that does not hold yet saw instead, for the failure.
    type Seen: Debug;
    fn done(self) -> Result<Self::Done, Self::Seen>;
}

/// `true` when done.
impl Outcome for bool {
    type Done = ();
    type Seen = bool;
    fn done(self) -> Result<(), bool> {
        done_if(self, false)
    }
}

/// `Some` when done.
impl<T> Outcome for Option<T> {
    type Done = T;
    type Seen = &'static str;
    fn done(self) -> Result<T, &'static str> {
        self.ok_or("None")
    }
}

/// `Ok` when done; `Err` carries what was seen instead.
impl<T, O: Debug> Outcome for Result<T, O> {
    type Done = T;
    type Seen = O;
    fn done(self) -> Self {
        self
    }
}

/// A check's answer when it gives nothing: done when `done`, else what was
/// `seen` instead.
pub fn done_if<O>(done: bool, seen: O) -> Result<(), O> {
    if done {
        Ok(())
    } else {
        Err(seen)
    }
}

/// Runs `check` every [`POLL`] until it holds, and returns what it gives;
/// after `timeout`, fails the test with `what` (what was awaited) and what
/// the last check saw.
pub async fn eventually<R: Outcome>(
    what: &str,
    timeout: Duration,
    check: impl AsyncFnMut() -> R,
) -> R::Done {
    eventually_every(what, timeout, POLL, check).await
}

/// [`eventually`], looking again every `every` (for checks that cost more,
/// or that always looked at their own pace).
pub async fn eventually_every<R: Outcome>(
    what: &str,
    timeout: Duration,
    every: Duration,
    check: impl AsyncFnMut() -> R,
) -> R::Done {
    match poll_until(timeout, every, check).await {
        Ok(done) => done,
        Err(seen) => panic!("waited {timeout:?} for {what}; last saw {seen:?}"),
    }
}

/// Runs `check` every `every` until it holds, for at most `timeout`: what
/// it gives, or what the last check saw (for waits that go on either way).
pub async fn poll_until<R: Outcome>(
    timeout: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> R,
) -> Result<R::Done, R::Seen> {
    let deadline = Instant::now() + timeout;
    loop {
        match check().await.done() {
            Ok(done) => return Ok(done),
            Err(seen) if Instant::now() >= deadline => return Err(seen),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}
