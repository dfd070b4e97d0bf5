//! Single flight: the requests that miss one cache entry together share
//! one computation of it, so an expiring front page costs one execution,
//! not one per waiting client.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::{Cached, Position};

/// Responses being computed, one per key (bounded by the requests in
/// flight). A request joins only one started at the cache's current
/// [`Position`]: a client that voted never reads a page from before.
#[derive(Default, Clone)]
pub(super) struct Flights(Arc<Mutex<HashMap<String, (Position, BodyReceiver)>>>);

/// None until the computed body arrives.
type BodyReceiver = watch::Receiver<Option<Arc<Cached>>>;

/// What a request that missed the cache does.
pub(crate) enum Flight {
    /// Compute the response, then [`Computation::publish`] it for the others.
    Compute(Computation),
    /// Wait for the request computing it ([`Waiter::wait`]).
    Wait(Waiter),
}

impl Flights {
    pub(super) fn join(&self, key: &str, now: Position) -> Flight {
        let mut flights = self.0.lock();
        if let Some((started, receiver)) = flights.get(key) {
            if *started == now {
                return Flight::Wait(Waiter(receiver.clone()));
            }
        }
        Flight::Compute(self.lead(&mut flights, key, now))
    }

    /// Leads a computation of `key` from `now` if none is under way.
    pub(super) fn compute_alone(&self, key: &str, now: Position) -> Option<Computation> {
        let mut flights = self.0.lock();
        if flights.contains_key(key) {
            return None;
        }
        Some(self.lead(&mut flights, key, now))
    }

    fn lead(
        &self,
        flights: &mut HashMap<String, (Position, BodyReceiver)>,
        key: &str,
        now: Position,
    ) -> Computation {
        let (sender, receiver) = watch::channel(None);
        flights.insert(key.to_owned(), (now, receiver));
        Computation {
            flights: self.clone(),
            key: key.to_owned(),
            sender,
        }
    }
}

/// The request computing a response others wait for; dropped without
/// publishing, it lets them compute it themselves.
pub(crate) struct Computation {
    flights: Flights,
    key: String,
    sender: watch::Sender<Option<Arc<Cached>>>,
}

impl Computation {
    /// Hands the body to every request waiting for it.
    pub fn publish(self, body: Arc<Cached>) {
        let _ = self.sender.send(Some(body));
    }
}

impl Drop for Computation {
    fn drop(&mut self) {
        let mut flights = self.flights.0.lock();
        if flights
            .get(&self.key)
            .is_some_and(|(_, r)| r.same_channel(&self.sender.subscribe()))
        {
            flights.remove(&self.key);
        }
    }
}

pub(crate) struct Waiter(BodyReceiver);

impl Waiter {
    /// The leader's body, or None when it gave up or `patience` ran out
    /// (the caller then computes the response itself).
    pub async fn wait(mut self, patience: Duration) -> Option<Arc<Cached>> {
        let landed = tokio::time::timeout(patience, self.0.wait_for(Option::is_some)).await;
        match landed {
            Ok(Ok(body)) => body.clone(),
            _ => None,
        }
    }
}
