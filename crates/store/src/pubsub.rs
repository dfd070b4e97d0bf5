//! Score-change and new-post events, from Redis pub/sub to every subscriber
//! in the process (ended sessions too, for the WebSockets' logins).
//!
//! The vote and post scripts publish from inside their atomic writes, so
//! events arrive in write order, from every instance. One pub/sub connection
//! per process fans them out through a `broadcast` channel per kind: memory
//! is bounded by [`CAPACITY`] shared events, a subscriber that falls behind
//! skips what it missed instead of blocking the others, and a lost
//! connection is made again with backoff (pub/sub is at-most-once: nothing
//! is replayed).
//!
//! A shared subscription's one receiver is taken uncounted and the
//! subscribers it serves are counted instead, so [`PubSub::subscribers`]
//! counts client subscriptions either way.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::sync::{broadcast, watch};

use crate::store::keys::{MODERATED_CHANNEL, POSTED_CHANNEL, SCORE_CHANNEL, SESSION_ENDED_CHANNEL};
use crate::store::Locator;
use tokio_util::task::AbortOnDropHandle;

/// Events kept for slow subscribers before they start skipping.
pub const CAPACITY: usize = 4096;

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One vote's effect, as published by the vote script.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ScoreEvent {
    /// The article id, as text (`"7"`).
    pub id: String,
    #[serde(deserialize_with = "number")]
    pub score: f64,
    pub votes: i64,
    pub downvotes: i64,
    /// Unix seconds (Redis' clock) when the vote was made.
    #[serde(deserialize_with = "number")]
    pub at: f64,
    /// Lua's cjson encodes an empty table as `{}`, hence the lenient parse.
    #[serde(default, deserialize_with = "groups_list")]
    pub groups: Vec<String>,
}

/// A new article, as published by the post script.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PostedEvent {
    /// The article id, as text (`"7"`).
    pub id: String,
    /// Unix seconds (Redis' clock) when it was posted.
    #[serde(deserialize_with = "number")]
    pub at: f64,
    #[serde(default, deserialize_with = "groups_list")]
    pub groups: Vec<String>,
}

/// A moderation, as the moderation scripts publish it: an article taken
/// out (`removed`) or put back, or a user banned, unbanned or given a role.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModeratedEvent {
    /// The article id, as text, for an article's moderation.
    pub id: Option<String>,
    #[serde(default, deserialize_with = "groups_list")]
    pub groups: Vec<String>,
    #[serde(default)]
    pub removed: bool,
}

/// A number sent as a JSON number or, to keep all its digits, as a string.
fn number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| serde::de::Error::custom("number out of range")),
        serde_json::Value::String(s) => s.parse().map_err(serde::de::Error::custom),
        other => Err(serde::de::Error::custom(format!(
            "expected a number, got {other}"
        ))),
    }
}

fn groups_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Array(items) => items
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    })
}

/// Follows `receiver` through lagging (a slow subscriber skips what it
/// missed) until the channel closes, keeping the events `wanted` says.
pub async fn next_wanted<T: ?Sized>(
    receiver: &mut broadcast::Receiver<Arc<T>>,
    wanted: impl Fn(&T) -> bool,
) -> Option<Arc<T>> {
    loop {
        match receiver.recv().await {
            Ok(event) if wanted(&event) => return Some(event),
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(missed, "slow subscriber skipped events");
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// What the listener has seen, for `/metrics`.
#[derive(Default)]
pub struct PubSubStats {
    /// Events received (score changes and new posts).
    pub events: AtomicU64,
    /// Messages on the channels that were not events.
    pub malformed: AtomicU64,
    /// Subscriptions made: each after the first follows a lost connection.
    pub subscribed: AtomicU64,
    /// Failed attempts to connect or subscribe.
    pub failures: AtomicU64,
    /// Whether the connection is subscribed now.
    pub connected: AtomicBool,
}

/// Handle to the process' event hub; cheap to clone.
#[derive(Clone)]
pub struct PubSub {
    hub: Arc<Hub>,
    resubscriptions: watch::Receiver<u64>,
    /// Receivers held by the server itself (the response cache), which are
    /// not client subscriptions.
    internal: Arc<AtomicUsize>,
    /// Client subscriptions served by shared executions, whose receivers
    /// are among `internal`.
    shared: Arc<AtomicUsize>,
    /// Stops the listener when the last handle goes.
    _task: Arc<AbortOnDropHandle<()>>,
}

/// Keeps a receiver out of [`PubSub::subscribers`] while it lives; dropped
/// after the receiver it was taken with, it gives the count back.
pub struct Uncounted(Arc<AtomicUsize>);

impl Drop for Uncounted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PubSub {
    /// Starts listening in the background; it keeps trying while Redis is down.
    pub fn start(locator: Locator) -> Self {
        let (resubscribed, resubscriptions) = watch::channel(0);
        let hub = Arc::new(Hub {
            scores: broadcast::channel(CAPACITY).0,
            posts: broadcast::channel(CAPACITY).0,
            ended: broadcast::channel(CAPACITY).0,
            moderated: broadcast::channel(CAPACITY).0,
            stats: PubSubStats::default(),
            resubscribed,
            stopping: AtomicBool::new(false),
        });
        let task = tokio::spawn(listen(locator, hub.clone()));
        Self {
            hub,
            resubscriptions,
            internal: Arc::default(),
            shared: Arc::default(),
            _task: Arc::new(AbortOnDropHandle::new(task)),
        }
    }

    /// Stops listening once the connection closes, without a warning or
    /// another attempt: for a server stopping, before its Redis goes.
    pub fn stop(&self) {
        self.hub.stopping.store(true, Ordering::SeqCst);
    }

    /// A new receiver of every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<ScoreEvent>> {
        self.hub.scores.subscribe()
    }

    /// A new receiver of every new post from now on.
    pub fn subscribe_posts(&self) -> broadcast::Receiver<Arc<PostedEvent>> {
        self.hub.posts.subscribe()
    }

    /// A receiver of the token hashes of sessions ended from now on (by
    /// `logOut` on any instance). Not a client subscription: not counted.
    pub(crate) fn subscribe_ended_sessions(&self) -> broadcast::Receiver<Arc<str>> {
        self.hub.ended.subscribe()
    }

    /// A new receiver of moderations from now on (`articleRemoved`).
    pub fn subscribe_moderated(&self) -> broadcast::Receiver<Arc<ModeratedEvent>> {
        self.hub.moderated.subscribe()
    }

    /// Changes each time the connection is subscribed again after a loss
    /// (a Redis restart, a failover): the events published meanwhile were
    /// lost, so what was derived from them (cached pages) must go.
    pub fn resubscriptions(&self) -> watch::Receiver<u64> {
        self.resubscriptions.clone()
    }

    /// The listener's counters.
    pub fn stats(&self) -> &PubSubStats {
        &self.hub.stats
    }

    /// Keeps one receiver out of [`PubSub::subscribers`] while it lives:
    /// the server's own, or a shared execution's (drop it after the receiver).
    pub fn uncounted(&self) -> Uncounted {
        self.internal.fetch_add(1, Ordering::Relaxed);
        Uncounted(self.internal.clone())
    }

    /// `n` more client subscriptions are served by shared executions.
    pub fn add_shared(&self, n: usize) {
        self.shared.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` fewer client subscriptions are served by shared executions.
    pub fn remove_shared(&self, n: usize) {
        self.shared.fetch_sub(n, Ordering::Relaxed);
    }

    /// How many client subscriptions are live in this process: receivers
    /// of their own, plus those served by shared executions.
    pub fn subscribers(&self) -> usize {
        let hub = &self.hub;
        (hub.scores.receiver_count()
            + hub.posts.receiver_count()
            + hub.moderated.receiver_count()
            + self.shared.load(Ordering::Relaxed))
        .saturating_sub(self.internal.load(Ordering::Relaxed))
    }
}

/// Where the listener sends what it receives.
struct Hub {
    scores: broadcast::Sender<Arc<ScoreEvent>>,
    posts: broadcast::Sender<Arc<PostedEvent>>,
    ended: broadcast::Sender<Arc<str>>,
    moderated: broadcast::Sender<Arc<ModeratedEvent>>,
    stats: PubSubStats,
    /// Counts subscriptions made after the first (see
    /// [`PubSub::resubscriptions`]).
    resubscribed: watch::Sender<u64>,
    /// Set by [`PubSub::stop`].
    stopping: AtomicBool,
}

impl Hub {
    /// Sends one message on to the subscribers of its kind (having no
    /// subscribers is fine).
    fn dispatch(&self, message: &redis::Msg) {
        let payload = message.get_payload_bytes();
        let channel = message.get_channel_name();
        let sent = match channel {
            SESSION_ENDED_CHANNEL => std::str::from_utf8(payload)
                .map(|hash| drop(self.ended.send(Arc::from(hash))))
                .map_err(|e| e.to_string()),
            MODERATED_CHANNEL => relay(&self.moderated, payload),
            POSTED_CHANNEL => relay(&self.posts, payload),
            _ => relay(&self.scores, payload),
        };
        match sent {
            Ok(()) => {
                self.stats.events.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(channel, error = %e, "malformed event");
            }
        }
    }
}

/// Sends a JSON event on to its receivers.
fn relay<T: DeserializeOwned>(
    sender: &broadcast::Sender<Arc<T>>,
    payload: &[u8],
) -> Result<(), String> {
    let event = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    let _ = sender.send(Arc::new(event));
    Ok(())
}

async fn listen(locator: Locator, hub: Arc<Hub>) {
    let stats = &hub.stats;
    // Where Redis is (never the password), so a wrong REDIS_URL is named.
    let redis = locator.describe();
    let mut backoff = MIN_BACKOFF;
    loop {
        // Asked anew each time: after a failover, the new primary.
        let subscribed = async {
            let mut pubsub = locator.client().await?.get_async_pubsub().await?;
            let channels = [
                SCORE_CHANNEL,
                POSTED_CHANNEL,
                SESSION_ENDED_CHANNEL,
                MODERATED_CHANNEL,
            ];
            pubsub.subscribe(&channels).await.map(|()| pubsub)
        };
        match subscribed.await {
            Ok(pubsub) => {
                tracing::info!(%redis, channel = SCORE_CHANNEL, "subscribed to score changes");
                if stats.subscribed.fetch_add(1, Ordering::Relaxed) > 0 {
                    hub.resubscribed.send_modify(|n| *n += 1);
                }
                stats.connected.store(true, Ordering::Relaxed);
                backoff = MIN_BACKOFF;
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    hub.dispatch(&message);
                }
                stats.connected.store(false, Ordering::Relaxed);
                if hub.stopping.load(Ordering::SeqCst) {
                    return;
                }
                tracing::warn!(%redis, "pub/sub connection closed; reconnecting");
            }
            Err(_) if hub.stopping.load(Ordering::SeqCst) => return,
            Err(e) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%redis, error = %e, "subscribing to score changes failed")
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::ScoreEvent;

    #[test]
    fn events_parse_as_the_vote_script_writes_them() {
        let with: ScoreEvent = serde_json::from_str(
            r#"{"id":"7","score":"1795375645.6791127","votes":2,"downvotes":1,"at":"1700000001.250000","groups":["a","b"]}"#,
        )
        .unwrap();
        assert_eq!(with.groups, ["a", "b"]);
        assert_eq!(with.votes, 2);
        assert_eq!(with.score, 1795375645.6791127);
        assert_eq!(with.at, 1700000001.25);
        // cjson writes an empty Lua table as an object.
        let without: ScoreEvent = serde_json::from_str(
            r#"{"id":"7","score":1.0,"votes":1,"downvotes":0,"at":1.0,"groups":{}}"#,
        )
        .unwrap();
        assert!(without.groups.is_empty());
    }
}
