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

/// What the listener has seen, for `/metrics`.
#[derive(Default)]
pub struct PubSubStats {
    /// Events received (score changes and new posts).
    pub(crate) events: AtomicU64,
    /// Messages on the channels that were not events.
    pub(crate) malformed: AtomicU64,
    /// Subscriptions made: each after the first follows a lost connection.
    pub(crate) subscribed: AtomicU64,
    /// Failed attempts to connect or subscribe.
    pub(crate) failures: AtomicU64,
    /// Whether the connection is subscribed now.
    pub(crate) connected: AtomicBool,
}

/// Handle to the process' event hub; cheap to clone.
#[derive(Clone)]
pub struct PubSub {
    tx: broadcast::Sender<Arc<ScoreEvent>>,
    posts: broadcast::Sender<Arc<PostedEvent>>,
    /// Ended sessions' token hashes (see `sessions.rs`).
    ended: broadcast::Sender<Arc<str>>,
    moderated: broadcast::Sender<Arc<ModeratedEvent>>,
    resubscriptions: watch::Receiver<u64>,
    stats: Arc<PubSubStats>,
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
        let (tx, _) = broadcast::channel(CAPACITY);
        let (posts, _) = broadcast::channel(CAPACITY);
        let (ended, _) = broadcast::channel(CAPACITY);
        let (moderated, _) = broadcast::channel(CAPACITY);
        let stats = Arc::new(PubSubStats::default());
        let (resubscribed, resubscriptions) = watch::channel(0);
        let hub = Hub {
            scores: tx.clone(),
            posts: posts.clone(),
            ended: ended.clone(),
            moderated: moderated.clone(),
            stats: stats.clone(),
            resubscribed,
        };
        let task = tokio::spawn(listen(locator, hub));
        Self {
            tx,
            posts,
            ended,
            moderated,
            resubscriptions,
            stats,
            internal: Arc::default(),
            shared: Arc::default(),
            _task: Arc::new(AbortOnDropHandle::new(task)),
        }
    }

    /// A new receiver of every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<ScoreEvent>> {
        self.tx.subscribe()
    }

    /// A receiver for the server's own use, kept for the life of the process
    /// and not counted by [`PubSub::subscribers`].
    pub fn subscribe_internal(&self) -> broadcast::Receiver<Arc<ScoreEvent>> {
        self.internal.fetch_add(1, Ordering::Relaxed);
        self.tx.subscribe()
    }

    /// A new receiver of every new post from now on.
    pub fn subscribe_posts(&self) -> broadcast::Receiver<Arc<PostedEvent>> {
        self.posts.subscribe()
    }

    /// Like [`PubSub::subscribe_uncounted`], for new posts.
    pub fn subscribe_posts_uncounted(&self) -> (broadcast::Receiver<Arc<PostedEvent>>, Uncounted) {
        self.internal.fetch_add(1, Ordering::Relaxed);
        (self.posts.subscribe(), Uncounted(self.internal.clone()))
    }

    /// A receiver of the token hashes of sessions ended from now on (by
    /// `logOut` on any instance). Not a client subscription: not counted.
    pub fn subscribe_ended_sessions(&self) -> broadcast::Receiver<Arc<str>> {
        self.ended.subscribe()
    }

    /// A new receiver of moderations from now on (`articleRemoved`).
    pub fn subscribe_moderated(&self) -> broadcast::Receiver<Arc<ModeratedEvent>> {
        self.moderated.subscribe()
    }

    /// Like [`PubSub::subscribe_uncounted`], for moderations.
    pub fn subscribe_moderated_uncounted(
        &self,
    ) -> (broadcast::Receiver<Arc<ModeratedEvent>>, Uncounted) {
        self.internal.fetch_add(1, Ordering::Relaxed);
        (self.moderated.subscribe(), Uncounted(self.internal.clone()))
    }

    /// Changes each time the connection is subscribed again after a loss
    /// (a Redis restart, a failover): the events published meanwhile were
    /// lost, so what was derived from them (cached pages) must go.
    pub fn resubscriptions(&self) -> watch::Receiver<u64> {
        self.resubscriptions.clone()
    }

    /// The listener's counters.
    pub fn stats(&self) -> &PubSubStats {
        &self.stats
    }

    /// A shared execution's receiver, not counted by [`PubSub::subscribers`]
    /// while the [`Uncounted`] lives (drop it after the receiver).
    pub fn subscribe_uncounted(&self) -> (broadcast::Receiver<Arc<ScoreEvent>>, Uncounted) {
        self.internal.fetch_add(1, Ordering::Relaxed);
        (self.tx.subscribe(), Uncounted(self.internal.clone()))
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
        (self.tx.receiver_count()
            + self.posts.receiver_count()
            + self.moderated.receiver_count()
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
    stats: Arc<PubSubStats>,
    /// Counts subscriptions made after the first (see
    /// [`PubSub::resubscriptions`]).
    resubscribed: watch::Sender<u64>,
}

impl Hub {
    /// Sends one message on to the subscribers of its kind (having no
    /// subscribers is fine).
    fn dispatch(&self, message: &redis::Msg) {
        let payload = message.get_payload_bytes();
        let channel = message.get_channel_name();
        let sent: Result<(), String> = if channel == SESSION_ENDED_CHANNEL {
            std::str::from_utf8(payload)
                .map(|hash| drop(self.ended.send(Arc::from(hash))))
                .map_err(|e| e.to_string())
        } else if channel == MODERATED_CHANNEL {
            serde_json::from_slice::<ModeratedEvent>(payload)
                .map(|e| drop(self.moderated.send(Arc::new(e))))
                .map_err(|e| e.to_string())
        } else if channel == POSTED_CHANNEL {
            serde_json::from_slice::<PostedEvent>(payload)
                .map(|e| drop(self.posts.send(Arc::new(e))))
                .map_err(|e| e.to_string())
        } else {
            serde_json::from_slice::<ScoreEvent>(payload)
                .map(|e| drop(self.scores.send(Arc::new(e))))
                .map_err(|e| e.to_string())
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

async fn listen(locator: Locator, hub: Hub) {
    let stats = hub.stats.clone();
    // Where Redis is (never the password), so a wrong REDIS_URL is named.
    let redis = locator.describe();
    let mut backoff = MIN_BACKOFF;
    loop {
        // Asked anew each time: after a failover, the new primary.
        let pubsub = async { locator.client().await?.get_async_pubsub().await };
        match pubsub.await {
            Ok(mut pubsub) => match pubsub
                .subscribe(&[
                    SCORE_CHANNEL,
                    POSTED_CHANNEL,
                    SESSION_ENDED_CHANNEL,
                    MODERATED_CHANNEL,
                ])
                .await
            {
                Ok(()) => {
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
                    tracing::warn!(%redis, "pub/sub connection closed; reconnecting");
                }
                Err(e) => {
                    stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%redis, error = %e, "subscribing to score changes failed")
                }
            },
            Err(e) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%redis, error = %e, "pub/sub connection failed")
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
