//! One process-wide budget for the work in flight, so that any number of
//! concurrent legal requests keeps memory bounded.
//!
//! Each query or mutation is admitted for its cost (the number of objects
//! its response can hold, from `graphql::limits`, plus one for the request
//! itself) and holds those units until its response is built and, over
//! HTTP, written: a response's memory grows with its cost while it is
//! built, and the per-request limits alone would let many maximum-cost
//! requests in at once. The budget caps their sum.
//!
//! - A request that does not fit waits up to a short time for others to
//!   finish, then is refused with `SERVICE_UNAVAILABLE` (503,
//!   `Retry-After`): a client told to come back, never a starved runtime.
//! - The budget is two semaphores: the shared nine tenths, and the last
//!   tenth kept for small requests (at most a tenth of the budget), so the
//!   front page answers while someone runs the maximum query in a loop.
//! - Large requests wait in turn for the shared part; a small one waits
//!   for whichever part frees room first, so it is never stuck behind a
//!   large one that does not fit.
//! - A request larger than the shared part takes the whole budget and runs
//!   alone; while it waits for the reserve, small ones wait behind it (this
//!   happens only with a budget below the largest query's cost).
//!
//! Responses served from the response cache are shared and cost nothing;
//! subscriptions hold nothing between events (their events are small and
//! their number is bounded by the WebSocket limits).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::AppError;

/// Seconds a refused client is told to wait.
const RETRY_AFTER_SECS: u64 = 1;

/// The budget's settings.
#[derive(Debug, Clone, Copy)]
pub struct BudgetSettings {
    /// Units (query cost) all admitted requests may hold together.
    pub capacity: u64,
    /// How long a request may wait for units before it is refused.
    pub wait: Duration,
}

/// The budget, shared by every request of the process.
#[derive(Clone)]
pub struct WorkBudget(Arc<Inner>);

struct Inner {
    settings: BudgetSettings,
    /// The nine tenths that any request may take.
    shared: Arc<Semaphore>,
    /// The last tenth, for small requests only.
    reserve: Arc<Semaphore>,
    stats: BudgetStats,
}

/// What `/metrics` reports of the budget.
#[derive(Default)]
pub struct BudgetStats {
    in_use: AtomicU64,
    waiting: AtomicU64,
    admitted: AtomicU64,
    waited: AtomicU64,
    refused: AtomicU64,
}

impl BudgetStats {
    /// Units held now.
    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Requests waiting for units now.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Requests admitted, ever.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Requests admitted after waiting, ever.
    pub fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// Requests refused for want of units, ever.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Which part of the budget a request may take.
#[derive(Clone, Copy)]
enum Size {
    /// At most the reserve: either part.
    Small,
    /// The shared part only.
    Large,
    /// More than the shared part: all of both.
    Whole,
}

/// Units held by one admitted request, given back when dropped.
pub struct Permit {
    budget: Arc<Inner>,
    units: u64,
    _held: Vec<OwnedSemaphorePermit>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget
            .stats
            .in_use
            .fetch_sub(self.units, Ordering::Relaxed);
    }
}

impl WorkBudget {
    pub fn new(settings: BudgetSettings) -> Self {
        // A semaphore hands out at most `u32::MAX` permits at once.
        let capacity = settings.capacity.clamp(1, u64::from(u32::MAX));
        let reserve = capacity / 10;
        Self(Arc::new(Inner {
            settings: BudgetSettings {
                capacity,
                wait: settings.wait,
            },
            shared: Arc::new(Semaphore::new((capacity - reserve) as usize)),
            reserve: Arc::new(Semaphore::new(reserve as usize)),
            stats: BudgetStats::default(),
        }))
    }

    pub fn settings(&self) -> BudgetSettings {
        self.0.settings
    }

    pub fn stats(&self) -> &BudgetStats {
        &self.0.stats
    }

    /// Admits a request of query cost `cost`, waiting up to the budget's
    /// wait for room; `SERVICE_UNAVAILABLE` when none is made in time.
    pub async fn admit(&self, cost: u64) -> Result<Permit, AppError> {
        let inner = &self.0;
        let units = cost.saturating_add(1);
        if let Some(held) = inner.try_take(units) {
            return Ok(self.permit(units, held));
        }
        inner.stats.waiting.fetch_add(1, Ordering::Relaxed);
        let taken = tokio::time::timeout(inner.settings.wait, inner.take(units)).await;
        inner.stats.waiting.fetch_sub(1, Ordering::Relaxed);
        match taken {
            Ok(Some(held)) => {
                inner.stats.waited.fetch_add(1, Ordering::Relaxed);
                Ok(self.permit(units, held))
            }
            Ok(None) | Err(_) => {
                inner.stats.refused.fetch_add(1, Ordering::Relaxed);
                Err(AppError::Busy {
                    retry_after_secs: RETRY_AFTER_SECS,
                })
            }
        }
    }

    fn permit(&self, units: u64, held: Vec<OwnedSemaphorePermit>) -> Permit {
        let stats = &self.0.stats;
        stats.in_use.fetch_add(units, Ordering::Relaxed);
        stats.admitted.fetch_add(1, Ordering::Relaxed);
        Permit {
            budget: self.0.clone(),
            units,
            _held: held,
        }
    }
}

impl Inner {
    fn size(&self, units: u64) -> Size {
        let reserve = self.reserve_units();
        if units <= reserve {
            Size::Small
        } else if units <= self.settings.capacity - reserve {
            Size::Large
        } else {
            Size::Whole
        }
    }

    fn reserve_units(&self) -> u64 {
        self.settings.capacity / 10
    }

    /// The permits for `units`, if there is room now.
    fn try_take(&self, units: u64) -> Option<Vec<OwnedSemaphorePermit>> {
        let (shared, reserve) = (&self.shared, &self.reserve);
        let held = match self.size(units) {
            Size::Small => {
                let n = units as u32;
                let permit = reserve.clone().try_acquire_many_owned(n);
                vec![permit
                    .or_else(|_| shared.clone().try_acquire_many_owned(n))
                    .ok()?]
            }
            Size::Large => vec![shared.clone().try_acquire_many_owned(units as u32).ok()?],
            Size::Whole => {
                let all = self.shared_units() as u32;
                let shared = shared.clone().try_acquire_many_owned(all).ok()?;
                let all = self.reserve_units() as u32;
                vec![shared, reserve.clone().try_acquire_many_owned(all).ok()?]
            }
        };
        Some(held)
    }

    /// The permits for `units`, once there is room (`None` only if a
    /// semaphore were closed, which none is).
    async fn take(&self, units: u64) -> Option<Vec<OwnedSemaphorePermit>> {
        let (shared, reserve) = (self.shared.clone(), self.reserve.clone());
        let held = match self.size(units) {
            Size::Small => {
                let n = units as u32;
                tokio::select! {
                    permit = reserve.acquire_many_owned(n) => vec![permit.ok()?],
                    permit = shared.acquire_many_owned(n) => vec![permit.ok()?],
                }
            }
            Size::Large => vec![shared.acquire_many_owned(units as u32).await.ok()?],
            Size::Whole => {
                let all = self.shared_units() as u32;
                let shared = shared.acquire_many_owned(all).await.ok()?;
                let all = self.reserve_units() as u32;
                vec![shared, reserve.acquire_many_owned(all).await.ok()?]
            }
        };
        Some(held)
    }

    fn shared_units(&self) -> u64 {
        self.settings.capacity - self.reserve_units()
    }
}

/// A response body that holds its request's permit until the body is
/// written (or the connection drops it): a response waiting on a slow
/// reader still counts against the budget.
pub struct HeldBody<B> {
    body: B,
    _permit: Permit,
}

impl<B> HeldBody<B> {
    pub fn new(body: B, permit: Permit) -> Self {
        Self {
            body,
            _permit: permit,
        }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for HeldBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(capacity: u64, wait_ms: u64) -> WorkBudget {
        WorkBudget::new(BudgetSettings {
            capacity,
            wait: Duration::from_millis(wait_ms),
        })
    }

    #[tokio::test]
    async fn large_requests_leave_the_reserve_to_small_ones() {
        let budget = budget(1_000, 10);
        // Large: over the reserve of 100; nine tenths hold 899 + 1 units.
        let a = budget.admit(449).await.expect("first large");
        let b = budget.admit(449).await.expect("second large");
        assert_eq!(budget.stats().in_use(), 900);
        let refused = budget.admit(449).await.err().expect("no room");
        assert_eq!(refused.code(), "SERVICE_UNAVAILABLE");
        assert_eq!(refused.retry_after(), Some(1));
        // Small ones still fit in the reserve.
        let small: Vec<_> = futures_util::future::join_all((0..10).map(|_| budget.admit(9))).await;
        assert!(small.iter().all(Result::is_ok));
        assert_eq!(budget.stats().in_use(), 1_000);
        assert!(budget.admit(0).await.is_err(), "full");
        drop((a, b, small));
        assert_eq!(budget.stats().in_use(), 0);
        assert_eq!(budget.stats().refused(), 2);
    }

    #[tokio::test]
    async fn a_waiter_is_admitted_when_units_come_back() {
        let budget = budget(100, 5_000);
        let held = budget.admit(89).await.unwrap();
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.admit(89).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(budget.stats().waiting(), 1);
        drop(held);
        waiter.await.unwrap().expect("admitted once the first left");
        assert_eq!(budget.stats().waited(), 1);
        assert_eq!(budget.stats().waiting(), 0);
    }

    #[tokio::test]
    async fn a_small_request_is_not_stuck_behind_a_large_one_that_does_not_fit() {
        let budget = budget(1_000, 5_000);
        let large = budget.admit(449).await.unwrap();
        let mut small: Vec<_> = futures_util::future::join_all((0..10).map(|_| budget.admit(9)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.admit(599).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(budget.stats().waiting(), 1, "the large one waits");
        let next = tokio::spawn({
            let budget = budget.clone();
            async move { budget.admit(9).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        small.pop();
        tokio::time::timeout(Duration::from_secs(1), next)
            .await
            .expect("admitted once a small one left")
            .unwrap()
            .unwrap();
        assert_eq!(budget.stats().waiting(), 1, "the large one still waits");
        drop(large);
        waiter.await.unwrap().expect("admitted once the first left");
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_runs_alone() {
        let budget = budget(100, 10);
        let alone = budget
            .admit(1_000)
            .await
            .expect("runs when nothing else does");
        assert!(budget.admit(1).await.is_err(), "nothing else meanwhile");
        drop(alone);
        assert!(budget.admit(1_000).await.is_ok());
    }
}
