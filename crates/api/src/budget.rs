//! One process-wide budget for the work in flight (docs/security.md): each
//! query or mutation holds its cost until its response is written, waits a
//! little when it does not fit, then is refused with `SERVICE_UNAVAILABLE`.
//! Requests over a tenth of the budget leave that tenth to small ones. No
//! queue (not a `Semaphore`): a small request is never stuck behind a large
//! one that does not fit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::AppError;

/// Seconds a refused client is told to wait.
const RETRY_AFTER_SECS: u64 = 1;

/// The budget's settings, flags of their own.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct BudgetSettings {
    /// Query-cost units all queries and mutations in flight may hold together.
    #[arg(long, env = "VOTEGRAPH_WORK_BUDGET", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub work_budget: u64,

    /// How long (ms) a request waits for room in the work budget.
    #[arg(long, env = "VOTEGRAPH_WORK_WAIT_MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub work_wait_ms: u64,
}

/// The budget, shared by every request of the process.
#[derive(Clone)]
pub struct WorkBudget(Arc<Inner>);

#[derive(Default)]
struct Inner {
    settings: BudgetSettings,
    /// Units held by admitted requests.
    in_use: Mutex<u64>,
    /// Woken when units are given back.
    returned: Notify,
    waiting: AtomicU64,
    admitted: AtomicU64,
    waited: AtomicU64,
    refused: AtomicU64,
}

/// What `/metrics` reports of the budget: units held and requests waiting
/// now; requests admitted, admitted after waiting and refused, ever.
#[derive(Debug, Clone, Copy)]
pub struct BudgetStats {
    pub capacity: u64,
    pub in_use: u64,
    pub waiting: u64,
    pub admitted: u64,
    pub waited: u64,
    pub refused: u64,
}

/// Units held by one admitted request, given back when dropped.
pub struct Permit {
    budget: Arc<Inner>,
    units: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        *self.budget.in_use.lock() -= self.units;
        self.budget.returned.notify_waiters();
    }
}

impl WorkBudget {
    pub fn new(settings: BudgetSettings) -> Self {
        Self(Arc::new(Inner {
            settings: BudgetSettings {
                work_budget: settings.work_budget.max(1),
                ..settings
            },
            ..Inner::default()
        }))
    }

    pub fn stats(&self) -> BudgetStats {
        let inner = &self.0;
        BudgetStats {
            capacity: inner.settings.work_budget,
            in_use: *inner.in_use.lock(),
            waiting: inner.waiting.load(Ordering::Relaxed),
            admitted: inner.admitted.load(Ordering::Relaxed),
            waited: inner.waited.load(Ordering::Relaxed),
            refused: inner.refused.load(Ordering::Relaxed),
        }
    }

    /// Admits a request of query cost `cost`, waiting up to the budget's
    /// wait for room; `SERVICE_UNAVAILABLE` when none is made in time.
    pub async fn admit(&self, cost: u64) -> Result<Permit, AppError> {
        let inner = &self.0;
        let units = cost.saturating_add(1);
        if let Some(permit) = self.try_admit(units) {
            return Ok(permit);
        }
        inner.waiting.fetch_add(1, Ordering::Relaxed);
        let wait = Duration::from_millis(inner.settings.work_wait_ms);
        let admitted = tokio::time::timeout(wait, async {
            loop {
                // Registered before the check, so units given back in
                // between still wake this waiter.
                let returned = inner.returned.notified();
                tokio::pin!(returned);
                returned.as_mut().enable();
                if let Some(permit) = self.try_admit(units) {
                    return permit;
                }
                returned.await;
            }
        })
        .await;
        inner.waiting.fetch_sub(1, Ordering::Relaxed);
        match admitted {
            Ok(permit) => {
                inner.waited.fetch_add(1, Ordering::Relaxed);
                Ok(permit)
            }
            Err(_) => {
                inner.refused.fetch_add(1, Ordering::Relaxed);
                Err(AppError::Busy {
                    retry_after_secs: RETRY_AFTER_SECS,
                })
            }
        }
    }

    fn try_admit(&self, units: u64) -> Option<Permit> {
        let inner = &self.0;
        let capacity = inner.settings.work_budget;
        let reserve = capacity / 10;
        // A large request leaves the reserve to small ones; a request
        // larger than the whole budget still runs, alone.
        let room = if units > reserve {
            capacity - reserve
        } else {
            capacity
        };
        let mut in_use = inner.in_use.lock();
        if *in_use + units > room && *in_use != 0 {
            return None;
        }
        *in_use += units;
        inner.admitted.fetch_add(1, Ordering::Relaxed);
        Some(Permit {
            budget: inner.clone(),
            units,
        })
    }
}

/// A response body holding its request's permit until it is written: one
/// waiting on a slow reader still counts against the budget.
pub struct HeldBody<B> {
    pub body: B,
    pub _permit: Permit,
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
    use crate::error::ErrorCode;

    fn budget(capacity: u64, wait_ms: u64) -> WorkBudget {
        WorkBudget::new(BudgetSettings {
            work_budget: capacity,
            work_wait_ms: wait_ms,
        })
    }

    #[tokio::test]
    async fn large_requests_leave_the_reserve_to_small_ones() {
        let budget = budget(1_000, 10);
        // Large: over the reserve of 100; nine tenths hold 899 + 1 units.
        let a = budget.admit(449).await.expect("first large");
        let b = budget.admit(449).await.expect("second large");
        assert_eq!(budget.stats().in_use, 900);
        let refused = budget.admit(449).await.err().expect("no room");
        assert_eq!(refused.code(), ErrorCode::ServiceUnavailable);
        assert_eq!(refused.retry_after(), Some(1));
        // Small ones still fit in the reserve.
        let small: Vec<_> = futures_util::future::join_all((0..10).map(|_| budget.admit(9))).await;
        assert!(small.iter().all(Result::is_ok));
        assert_eq!(budget.stats().in_use, 1_000);
        assert!(budget.admit(0).await.is_err(), "full");
        drop((a, b, small));
        assert_eq!(budget.stats().in_use, 0);
        assert_eq!(budget.stats().refused, 2);
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
        assert_eq!(budget.stats().waiting, 1);
        drop(held);
        waiter.await.unwrap().expect("admitted once the first left");
        assert_eq!(budget.stats().waited, 1);
        assert_eq!(budget.stats().waiting, 0);
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
