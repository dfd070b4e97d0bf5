//! Following every writer of the shared Redis, the book's code included.
//!
//! votegraph keeps indexes the book's keys do not have (the net-vote
//! rankings, the vote indexes `myVote` reads, the articles' group lists, the
//! group directory, users' feeds, karma) and its own scripts keep them with
//! each write. The book's `post_article`, `article_vote`,
//! `add_remove_groups` and its downvote exercise write only the book's
//! keys, so what they change is derived here:
//!
//! - **Keyspace notifications.** One pub/sub connection per process
//!   subscribes to the notifications of the voted sets, the group sets and
//!   `time:`/`score:` as wholes (see [`keys::keyspace_patterns`]); votegraph
//!   turns them on itself (`notify-keyspace-events`, flags `K`, `g` and `s`
//!   added to whatever is set) and says at startup and on `/health` when
//!   the server refuses. A notification names a key, not what changed in
//!   it, so each names the article or group to derive again.
//! - **A queue that coalesces.** Touched articles and groups wait in two
//!   bounded sets for [`COALESCE`], so a burst of writes to one article is
//!   one derivation; groups go first, with the batch's articles as the
//!   likely members (a post and its groups arrive together).
//! - **Derivations that write only what differs** (`scripts/derive.rs`):
//!   votegraph's own writes, and another instance's derivation of the same
//!   write, leave nothing to do but a few reads; each instance derives every
//!   notification, and the first one to run does the work (and publishes
//!   the event, once).
//! - **votegraph's own votes and posts are not derived again.** Their
//!   scripts keep everything derived from what they write; their events
//!   say how many notifications they raised on the voted sets (and a
//!   post's, its groups), and the listener, which receives those and then
//!   the event in order on one connection, takes the article and groups
//!   back out of the queue when they are all the event's (see
//!   [`OwnWrites`]). One vote is then one script, on every instance,
//!   rather than a vote and a derivation per instance.
//! - **Posts caught half written.** The book writes a post in several
//!   commands (its voted set first, `time:` and `score:` last), and only
//!   the first is notified: an article the derivation finds missing from
//!   `time:` is derived again [`ABSENT_RETRY`] later, up to
//!   [`ABSENT_TRIES`] times, so it is followed within a second rather than
//!   by the next pass of the sweep.
//! - **`time:` or `score:` replaced as a whole** (deleted, restored,
//!   renamed) names every article: one whole pass of the sweep runs at
//!   once, batch after batch, and articles gone from `time:` leave the
//!   net-vote rankings.
//! - **The sweep** (run by the upkeep, see `feeds.rs`) re-derives every
//!   article and group in turn, because pub/sub delivers at most once: a
//!   notification lost with its connection, a server that refuses to send
//!   them, or a change no notification names (an article's key restored
//!   alone) is caught by the next pass.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::keys::{self, Touched};
use super::scripts::{self, GroupDerived, GroupMode};
use super::{Conn, Locator, Store};
use crate::domain::{ArticleId, GroupName};
use crate::error::AppResult;
use tokio_util::task::AbortOnDropHandle;

/// How long touched keys wait to be derived together.
pub const COALESCE: Duration = Duration::from_millis(20);

/// Articles waiting at most; more are left to the sweep (and counted).
pub const MAX_PENDING_ARTICLES: usize = 100_000;

/// Groups waiting at most; likewise.
pub const MAX_PENDING_GROUPS: usize = 10_000;

/// Articles the sweep re-derives per round of upkeep (a second by
/// default, one instance per round): every article within
/// `articles / SWEEP_BATCH` rounds.
pub const SWEEP_BATCH: u64 = 2000;

/// Articles per sweep script: Redis runs nothing else while a script
/// runs, so each is kept to a few milliseconds.
pub const SWEEP_CALL: u64 = 500;

/// Keys the group sweep's `SCAN` visits per round of upkeep: every group
/// set within `keys / GROUP_SCAN_COUNT` rounds.
pub const GROUP_SCAN_COUNT: u64 = 10_000;

/// How long a notified article found missing from `time:` waits before
/// it is derived again (see the module doc).
pub const ABSENT_RETRY: Duration = Duration::from_millis(50);

/// How many times such an article is derived again before it is left to
/// the sweep: a second's worth (an article named by a voted set that no
/// post follows, written by hand, is not tried forever).
pub const ABSENT_TRIES: u8 = 20;

/// Articles per derivation script.
const ARTICLES_PER_CALL: usize = 100;

/// Articles of a batch tried as members of each touched group.
const MAX_CANDIDATES: usize = 256;

/// The notification flags the deriver needs: keyspace channels (`K`),
/// generic commands (`g`: DEL, RESTORE, RENAME, EXPIRE) and sets (`s`).
const NOTIFY_FLAGS: [char; 3] = ['K', 'g', 's'];

/// Whether Redis sends the notifications the deriver follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notifications {
    /// Not known yet (never connected).
    Starting,
    /// Subscribed, and the server sends them.
    On,
    /// The server's setting lacks the flags and `CONFIG SET` was refused:
    /// the sweep alone follows other writers.
    Refused,
    /// The subscription is down (reconnecting).
    Down,
}

impl Notifications {
    pub fn name(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::On => "on",
            Self::Refused => "refused",
            Self::Down => "down",
        }
    }

    fn from_u8(n: u8) -> Self {
        match n {
            1 => Self::On,
            2 => Self::Refused,
            3 => Self::Down,
            _ => Self::Starting,
        }
    }
}

#[derive(Default)]
struct Pending {
    articles: HashSet<ArticleId>,
    groups: HashSet<GroupName>,
    /// `time:` or `score:` changed as a whole: every article.
    everything: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.articles.is_empty() && self.groups.is_empty() && !self.everything
    }
}

/// Tells votegraph's own votes and posts from other writes in the
/// notification stream, so the deriver does not derive again what their
/// scripts kept themselves.
///
/// A script runs alone, so the notifications its writes raise reach a
/// subscriber together, in order, and its `PUBLISH` after them; the
/// listener receives both on one connection. A run is the notifications
/// received one after another of one article's voted sets, then of group
/// sets (a post's groups). The event of a vote, or of a post, says how
/// many notifications it raised on the voted sets (`notified`; a vote's
/// only when it left the article derived) and, for a post, the groups it
/// filed the article in. When the run just before the event names that
/// article, counts exactly that many, names exactly those groups (a vote:
/// none) once each, and queued each anew, every write in it was the
/// script's, and the article and the groups are taken back out of the
/// queue. Another writer's change in the run makes it larger (a script
/// never raises fewer than it says, while notifications are on with
/// votegraph's flags), and anything else (another article's sets, another
/// event, something already waiting) leaves them to be derived, as
/// before. Notifications of keys the deriver reads nothing from (sent
/// where the server notifies every type) are not part of the story. A
/// vote that empties a set raises a `del` it does not count, and is
/// derived: rare, and safe.
#[derive(Debug, Default)]
struct OwnWrites {
    run: Option<Run>,
}

#[derive(Debug)]
struct Run {
    id: ArticleId,
    count: u32,
    /// The run's first notification queued the article anew.
    queued: bool,
    /// The group sets notified after the article's, each with whether it
    /// queued the group anew; at most a post's groups.
    groups: Vec<(GroupName, bool)>,
}

/// Which event closes a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnEvent {
    Vote,
    Post,
}

/// The part of a score or posted event [`OwnWrites`] reads.
#[derive(Deserialize)]
struct Announced {
    id: String,
    /// Present when the script left the article derived.
    notified: Option<u32>,
    #[serde(default)]
    groups: serde_json::Value,
}

/// What a run showed to be a script's own writes: to take back out of
/// the queue.
#[derive(Debug, PartialEq, Eq)]
struct Own {
    article: ArticleId,
    groups: Vec<GroupName>,
}

impl OwnWrites {
    /// A notification that asked for `touched` to be derived; `queued`
    /// tells whether it queued it anew. `time:` or `score:` replaced as a
    /// whole ends the run.
    fn notified(&mut self, touched: Touched, queued: bool) {
        match touched {
            Touched::Article(id) => self.article(id, queued),
            Touched::Group(name) => self.group(name, queued),
            Touched::Everything => self.run = None,
        }
    }

    /// A notification of article `id`'s voted sets.
    fn article(&mut self, id: ArticleId, queued: bool) {
        match &mut self.run {
            Some(run) if run.id == id && run.groups.is_empty() => {
                run.count = run.count.saturating_add(1)
            }
            _ => {
                self.run = Some(Run {
                    id,
                    count: 1,
                    queued,
                    groups: Vec::new(),
                })
            }
        }
    }

    /// A notification of a group set.
    fn group(&mut self, name: GroupName, queued: bool) {
        match &mut self.run {
            Some(run) if run.groups.len() < GroupName::MAX_PER_ARTICLE => {
                run.groups.push((name, queued))
            }
            _ => self.run = None,
        }
    }

    /// A vote's or a post's event: what to take back out of the queue, if
    /// the run before it was all the script's.
    fn event(&mut self, kind: OwnEvent, payload: &[u8]) -> Option<Own> {
        let run = self.run.take()?;
        let event: Announced = serde_json::from_slice(payload).ok()?;
        let id = ArticleId::parse(&event.id, "id").ok()?;
        if run.id != id || !run.queued || event.notified != Some(run.count) {
            return None;
        }
        let mut named: Vec<&str> = match (kind, &event.groups) {
            (OwnEvent::Vote, _) => Vec::new(),
            (OwnEvent::Post, serde_json::Value::Array(groups)) => {
                groups.iter().filter_map(|g| g.as_str()).collect()
            }
            // cjson writes an empty list as {}.
            (OwnEvent::Post, serde_json::Value::Object(o)) if o.is_empty() => Vec::new(),
            (OwnEvent::Post, _) => return None,
        };
        let mut notified: Vec<&str> = Vec::with_capacity(run.groups.len());
        for (name, queued) in &run.groups {
            if !queued {
                return None;
            }
            notified.push(name.as_str());
        }
        named.sort_unstable();
        notified.sort_unstable();
        // Each group once: a group named twice is not a post's.
        if named.windows(2).any(|pair| pair[0] == pair[1]) || named != notified {
            return None;
        }
        Some(Own {
            article: id,
            groups: run.groups.into_iter().map(|(name, _)| name).collect(),
        })
    }
}

/// What waits to be derived, and how the following goes; shared by the
/// listener, the worker, the sweep and the reads that find an article
/// never derived.
#[derive(Default)]
pub struct DeriveQueue {
    pending: Mutex<Pending>,
    wake: Notify,
    notifications: AtomicU8,
    /// Notifications received.
    received: AtomicU64,
    /// Touches dropped because the queue was full (the sweep catches them).
    dropped: AtomicU64,
    /// Articles and groups whose derived data had to change.
    derived: AtomicU64,
    /// Derivation batches that failed (Redis down); tried again.
    failures: AtomicU64,
    /// Articles and groups taken back out of the queue because the vote or
    /// post that touched them had derived them itself (see [`OwnWrites`]).
    skipped: AtomicU64,
    /// A batch is being derived.
    busy: AtomicBool,
    /// Articles found missing from `time:`, by how many times (see
    /// [`ABSENT_TRIES`]); at most [`MAX_PENDING_ARTICLES`].
    absent: Mutex<HashMap<ArticleId, u8>>,
    /// Of those, how many wait for [`ABSENT_RETRY`] (counted as pending).
    retrying: AtomicUsize,
}

/// The deriver at a glance, for `/health` (and the tests that wait for it
/// to be idle before counting Redis commands).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeriverStats {
    /// `on`, `refused`, `down` or `starting` (see [`Notifications`]).
    pub notifications: &'static str,
    /// Articles and groups waiting to be derived.
    pub pending: usize,
    /// Whether a batch is being derived now.
    pub busy: bool,
    pub received: u64,
    pub derived: u64,
    pub dropped: u64,
    pub failures: u64,
    pub skipped: u64,
}

impl DeriveQueue {
    /// Asks for `touched` to be derived soon; never blocks. Answers whether
    /// it was queued anew (not already waiting, nor dropped).
    pub fn touch(&self, touched: Touched) -> bool {
        let mut pending = self.pending.lock();
        let room = match &touched {
            Touched::Article(_) => pending.articles.len() < MAX_PENDING_ARTICLES,
            Touched::Group(_) => pending.groups.len() < MAX_PENDING_GROUPS,
            Touched::Everything => true,
        };
        if !room {
            drop(pending);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let anew = match touched {
            Touched::Article(id) => pending.articles.insert(id),
            Touched::Group(name) => pending.groups.insert(name),
            Touched::Everything => !std::mem::replace(&mut pending.everything, true),
        };
        drop(pending);
        self.wake.notify_one();
        anew
    }

    /// Takes a script's own writes back out of the queue (see
    /// [`OwnWrites`]); what the worker has already taken is derived all
    /// the same.
    fn forget(&self, own: Own) {
        let mut pending = self.pending.lock();
        let mut n = u64::from(pending.articles.remove(&own.article));
        for name in &own.groups {
            n += u64::from(pending.groups.remove(name));
        }
        drop(pending);
        self.skipped.fetch_add(n, Ordering::Relaxed);
    }

    pub fn stats(&self) -> DeriverStats {
        let pending = {
            let pending = self.pending.lock();
            pending.articles.len() + pending.groups.len()
        } + self.retrying.load(Ordering::Relaxed);
        DeriverStats {
            notifications: self.notifications().name(),
            pending,
            busy: self.busy.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            derived: self.derived.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
        }
    }

    pub fn notifications(&self) -> Notifications {
        Notifications::from_u8(self.notifications.load(Ordering::Relaxed))
    }

    fn set_notifications(&self, state: Notifications) {
        self.notifications.store(state as u8, Ordering::Relaxed);
    }

    /// Takes the pending batch, marking the deriver busy until
    /// [`DeriveQueue::done`] (one lock, so `/health` never sees the batch
    /// neither pending nor busy).
    fn take(&self) -> Pending {
        let mut pending = self.pending.lock();
        self.busy.store(true, Ordering::Relaxed);
        std::mem::take(&mut *pending)
    }

    fn done(&self) {
        self.busy.store(false, Ordering::Relaxed);
    }

    /// After a batch: the articles it found missing from `time:` are
    /// derived again [`ABSENT_RETRY`] later, each up to [`ABSENT_TRIES`]
    /// times; the others are forgotten. Called before [`DeriveQueue::done`],
    /// so `/health` counts the waiting ones as pending throughout.
    fn retry_absent(self: &Arc<Self>, batch: &Pending, absent: Vec<ArticleId>) {
        let missing: HashSet<ArticleId> = absent.iter().copied().collect();
        let mut again = Vec::new();
        {
            let mut tries = self.absent.lock();
            for id in &batch.articles {
                if !missing.contains(id) {
                    tries.remove(id);
                }
            }
            for id in absent {
                if !tries.contains_key(&id) && tries.len() >= MAX_PENDING_ARTICLES {
                    continue;
                }
                let n = tries.entry(id).or_insert(0);
                *n += 1;
                if *n <= ABSENT_TRIES {
                    again.push(id);
                } else {
                    tries.remove(&id);
                }
            }
        }
        if again.is_empty() {
            return;
        }
        self.retrying.fetch_add(again.len(), Ordering::Relaxed);
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ABSENT_RETRY).await;
            for id in &again {
                let _ = queue.touch(Touched::Article(*id));
            }
            queue.retrying.fetch_sub(again.len(), Ordering::Relaxed);
        });
    }

    fn put_back(&self, batch: Pending) {
        for id in batch.articles {
            let _ = self.touch(Touched::Article(id));
        }
        for name in batch.groups {
            let _ = self.touch(Touched::Group(name));
        }
        if batch.everything {
            let _ = self.touch(Touched::Everything);
        }
    }
}

/// The deriver's tasks; dropping it stops them.
pub struct Deriver {
    _listener: AbortOnDropHandle<()>,
    _worker: AbortOnDropHandle<()>,
}

impl Store {
    /// Starts following other writers (see the module doc).
    pub fn start_deriver(&self) -> Deriver {
        let queue = self.derive_queue().clone();
        let listener = AbortOnDropHandle::new(tokio::spawn(listen(self.locator().clone(), queue)));
        let store = self.clone();
        let worker = AbortOnDropHandle::new(tokio::spawn(async move {
            let queue = store.derive_queue().clone();
            loop {
                queue.wake.notified().await;
                tokio::time::sleep(COALESCE).await;
                let batch = queue.take();
                if batch.is_empty() {
                    // All of it was taken back (own votes and posts).
                    queue.done();
                    continue;
                }
                match store.derive_batch(&batch).await {
                    Ok(absent) => {
                        queue.retry_absent(&batch, absent);
                        queue.done();
                    }
                    Err(e) => {
                        queue.done();
                        queue.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "deriving other clients' writes failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        queue.put_back(batch);
                    }
                }
            }
        }));
        Deriver {
            _listener: listener,
            _worker: worker,
        }
    }

    /// Derives one batch: groups first (with the batch's articles as
    /// candidates), then articles. Answers the articles found missing from
    /// `time:`.
    async fn derive_batch(&self, batch: &Pending) -> AppResult<Vec<ArticleId>> {
        let mut conn = self.conn().await?;
        let articles: Vec<ArticleId> = batch.articles.iter().copied().collect();
        let candidates = &articles[..articles.len().min(MAX_CANDIDATES)];
        for name in &batch.groups {
            self.follow_group(&mut conn, name, GroupMode::Check, candidates)
                .await?;
        }
        let mut absent = Vec::new();
        for chunk in articles.chunks(ARTICLES_PER_CALL) {
            let mut derived = scripts::derive_articles(&mut conn, chunk).await?;
            absent.append(&mut derived.absent);
            self.finish_derived(&mut conn, derived).await?;
        }
        if batch.everything {
            self.derive_everything(&mut conn).await?;
        }
        Ok(absent)
    }

    /// After `time:` or `score:` changed as a whole (deleted, restored,
    /// renamed): one whole pass of the sweep at once, batch after batch,
    /// then the articles gone from `time:` leave the net-vote rankings.
    /// Each batch is one bounded script; other clients run between them.
    /// Answers the articles passed.
    pub(super) async fn derive_everything(&self, conn: &mut Conn) -> AppResult<u64> {
        let mut at = scripts::TopCursor {
            from: "-inf".to_owned(),
            skip: 0,
        };
        let mut seen = 0;
        loop {
            let swept = scripts::sweep_articles(conn, &at, SWEEP_CALL).await?;
            seen += swept.seen;
            self.finish_derived(conn, swept.derived).await?;
            match swept.next {
                Some(next) => at = next,
                None => break,
            }
        }
        let mut cursor = "0".to_owned();
        loop {
            let batch = scripts::drop_absent(conn, &cursor, SWEEP_CALL).await?;
            self.count_derived(batch.count);
            if batch.next == "0" {
                return Ok(seen);
            }
            cursor = batch.next;
        }
    }

    /// Follows one group until its mirror matches it, scanning large ones
    /// in batches; answers how many articles changed.
    pub(super) async fn follow_group(
        &self,
        conn: &mut Conn,
        name: &GroupName,
        mode: GroupMode,
        candidates: &[ArticleId],
    ) -> AppResult<u64> {
        let mut changed = match scripts::derive_group(conn, name, mode, "0", candidates).await? {
            GroupDerived::Synced { changed } => {
                self.count_derived(changed);
                return Ok(changed);
            }
            GroupDerived::Scan { changed } | GroupDerived::Cursor { changed, .. } => changed,
        };
        for mode in [GroupMode::Add, GroupMode::Remove] {
            let mut cursor = "0".to_owned();
            loop {
                match scripts::derive_group(conn, name, mode, &cursor, &[]).await? {
                    GroupDerived::Cursor { next, changed: c } => {
                        changed += c;
                        if next == "0" {
                            break;
                        }
                        cursor = next;
                    }
                    GroupDerived::Synced { changed: c } | GroupDerived::Scan { changed: c } => {
                        changed += c;
                        break;
                    }
                }
            }
        }
        self.count_derived(changed);
        Ok(changed)
    }

    /// One step of the sweep through the group sets (a `SCAN` of
    /// [`GROUP_SCAN_COUNT`] keys from where `index:sweep` says, moved on):
    /// each group found is compared whole with its mirror.
    pub(super) async fn sweep_groups(&self, conn: &mut Conn) -> AppResult<()> {
        let cursor: Option<u64> = redis::cmd("HGET")
            .arg(keys::SWEEP)
            .arg("groups")
            .query_async(&mut *conn)
            .await?;
        let cursor = cursor.unwrap_or(0);
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{}*", keys::GROUP_PREFIX))
            .arg("COUNT")
            .arg(GROUP_SCAN_COUNT)
            .arg("TYPE")
            .arg("set")
            .query_async(&mut *conn)
            .await?;
        for key in found {
            if let Some(Touched::Group(name)) = keys::touched(&key) {
                self.follow_group(conn, &name, GroupMode::Full, &[]).await?;
            }
        }
        let () = redis::cmd("HSET")
            .arg(keys::SWEEP)
            .arg("groups")
            .arg(next)
            .query_async(conn)
            .await?;
        Ok(())
    }

    /// What a derivation script left: counts what it changed and indexes
    /// the voters of articles with too many for one script.
    pub(super) async fn finish_derived(
        &self,
        conn: &mut Conn,
        derived: scripts::Derived,
    ) -> AppResult<()> {
        self.count_derived(derived.changed);
        for id in derived.voters_left {
            index_all_voters(conn, id).await?;
        }
        Ok(())
    }

    fn count_derived(&self, n: u64) {
        self.derive_queue().derived.fetch_add(n, Ordering::Relaxed);
    }
}

/// Indexes every voter of an article too large for one script, in
/// batches, and records the sets' sizes once done.
async fn index_all_voters(conn: &mut Conn, id: ArticleId) -> AppResult<()> {
    let (ups, downs): (u64, u64) = redis::pipe()
        .cmd("SCARD")
        .arg(keys::voted(id))
        .cmd("SCARD")
        .arg(keys::downvoted(id))
        .query_async(conn)
        .await?;
    let snapshot = format!("{ups},{downs}");
    for down in [true, false] {
        let mut cursor = "0".to_owned();
        loop {
            let last = (!down).then_some(snapshot.as_str());
            let batch = scripts::index_voters(conn, id, down, &cursor, last).await?;
            if batch.next == "0" {
                break;
            }
            cursor = batch.next;
        }
    }
    Ok(())
}

/// Keeps the notification subscription up (reconnecting with backoff, like
/// the events' connection in `pubsub.rs`), turning notifications on each
/// time it connects, and queues what each one names.
async fn listen(locator: Locator, queue: Arc<DeriveQueue>) {
    let redis = locator.describe();
    let db = locator.any_address().redis_settings().db();
    let mut backoff = Duration::from_millis(100);
    let mut refused_logged = false;
    loop {
        let subscribed = async {
            let client = locator.client().await?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let enabled = enable_notifications(&mut conn).await;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.psubscribe(keys::keyspace_patterns(db)).await?;
            // On the same connection, so a vote's or a post's event
            // arrives after its notifications (see OwnWrites).
            pubsub
                .subscribe(&[keys::SCORE_CHANNEL, keys::POSTED_CHANNEL])
                .await?;
            Ok::<_, redis::RedisError>((enabled, pubsub))
        };
        match subscribed.await {
            Ok((enabled, pubsub)) => {
                match enabled {
                    Ok(()) => {
                        queue.set_notifications(Notifications::On);
                        tracing::info!(%redis, "following other clients' writes through keyspace notifications");
                    }
                    Err(e) => {
                        queue.set_notifications(Notifications::Refused);
                        if !refused_logged {
                            refused_logged = true;
                            tracing::warn!(
                                %redis,
                                error = %e,
                                "Redis refused to turn on keyspace notifications; writes by other clients (the book's code) are followed by the sweep alone. Set notify-keyspace-events to include K, g and s (e.g. \"Kgs\") to follow them within a second"
                            );
                        }
                    }
                }
                backoff = Duration::from_millis(100);
                let mut messages = pubsub.into_on_message();
                let mut own = OwnWrites::default();
                while let Some(message) = messages.next().await {
                    let channel = message.get_channel_name();
                    let kind = match channel {
                        keys::SCORE_CHANNEL => Some(OwnEvent::Vote),
                        keys::POSTED_CHANNEL => Some(OwnEvent::Post),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        // Only while the server sends every notification
                        // a script counts (votegraph's flags are on).
                        match own.event(kind, message.get_payload_bytes()) {
                            Some(writes) if queue.notifications() == Notifications::On => {
                                queue.forget(writes)
                            }
                            _ => {}
                        }
                        continue;
                    }
                    queue.received.fetch_add(1, Ordering::Relaxed);
                    let event: String = message.get_payload().unwrap_or_default();
                    // Keys the deriver reads nothing from (the vote's own
                    // rankings, where the server notifies every type) leave
                    // the run as it is.
                    if let Some(touched) =
                        keys::notified_key(channel, db).and_then(|key| keys::notified(key, &event))
                    {
                        let queued = queue.touch(touched.clone());
                        own.notified(touched, queued);
                    }
                }
                queue.set_notifications(Notifications::Down);
                tracing::warn!(%redis, "keyspace notification connection closed; reconnecting");
            }
            Err(e) => {
                queue.set_notifications(Notifications::Down);
                tracing::warn!(%redis, error = %e, "subscribing to keyspace notifications failed");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Adds the flags the deriver needs to `notify-keyspace-events`, keeping
/// the ones already set (other clients may rely on them).
async fn enable_notifications(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<(), redis::RedisError> {
    let (_, current): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(conn)
        .await?;
    let wanted = with_flags(&current);
    if wanted != current {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg(&wanted)
            .query_async(conn)
            .await?;
    }
    Ok(())
}

/// `current` with the flags of [`NOTIFY_FLAGS`] it lacks (`A` stands for
/// every type's flag, `g` and `s` included).
fn with_flags(current: &str) -> String {
    let mut flags = current.to_owned();
    for flag in NOTIFY_FLAGS {
        let covered = current.contains(flag) || (flag != 'K' && current.contains('A'));
        if !covered {
            flags.push(flag);
        }
    }
    flags
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn notification_flags_are_added_to_the_ones_set() {
        assert_eq!(with_flags(""), "Kgs");
        assert_eq!(with_flags("Ex"), "ExKgs");
        assert_eq!(with_flags("KA"), "KA");
        assert_eq!(with_flags("Egsh"), "EgshK");
    }

    fn event(id: u64, notified: Option<u32>) -> Vec<u8> {
        let mut event =
            json!({ "id": id.to_string(), "score": "1", "votes": 1, "groups": ["news"] });
        if let Some(n) = notified {
            event["notified"] = json!(n);
        }
        event.to_string().into_bytes()
    }

    fn posted(id: u64, groups: serde_json::Value) -> Vec<u8> {
        json!({ "id": id.to_string(), "at": "1.5", "groups": groups, "notified": 2 })
            .to_string()
            .into_bytes()
    }

    fn group(name: &str) -> GroupName {
        GroupName::parse(name).unwrap()
    }

    fn own(id: u64, groups: &[&str]) -> Option<Own> {
        Some(Own {
            article: ArticleId(id),
            groups: groups.iter().map(|g| group(g)).collect(),
        })
    }

    #[test]
    fn a_run_of_the_votes_own_notifications_is_taken_back() {
        let seven = ArticleId(7);
        let mut writes = OwnWrites::default();
        writes.article(seven, true);
        assert_eq!(
            writes.event(OwnEvent::Vote, &event(7, Some(1))),
            own(7, &[])
        );
        // A switch with a new set: three notifications, one run.
        for _ in 0..3 {
            writes.article(seven, true);
        }
        assert_eq!(
            writes.event(OwnEvent::Vote, &event(7, Some(3))),
            own(7, &[])
        );
        // The event ends the run: a second event takes back nothing.
        assert_eq!(writes.event(OwnEvent::Vote, &event(7, Some(3))), None);
    }

    #[test]
    fn anything_but_the_votes_own_notifications_is_derived() {
        let (seven, eight) = (ArticleId(7), ArticleId(8));
        let vote = |writes: &mut OwnWrites, n| writes.event(OwnEvent::Vote, &event(7, n));
        let mut writes = OwnWrites::default();
        // Another writer's change just before the vote's, in one run.
        writes.article(seven, true);
        writes.article(seven, false);
        assert_eq!(vote(&mut writes, Some(1)), None);
        // The article was already waiting (another write before).
        writes.article(seven, false);
        assert_eq!(vote(&mut writes, Some(1)), None);
        // Another article's notification last.
        writes.article(seven, true);
        writes.article(eight, true);
        assert_eq!(vote(&mut writes, Some(1)), None);
        // `time:` replaced as a whole between the notifications and the event.
        writes.article(seven, true);
        writes.notified(Touched::Everything, true);
        assert_eq!(vote(&mut writes, Some(1)), None);
        // A group set notified with the article's sets: not a vote's.
        writes.article(seven, true);
        writes.group(group("news"), true);
        assert_eq!(vote(&mut writes, Some(1)), None);
        // An event that counts nothing (a derivation's, or a vote on an
        // article not derived yet), or counts more, or does not parse.
        writes.article(seven, true);
        assert_eq!(vote(&mut writes, None), None);
        writes.article(seven, true);
        assert_eq!(vote(&mut writes, Some(2)), None);
        writes.article(seven, true);
        assert_eq!(writes.event(OwnEvent::Vote, b"{not json"), None);
        // No notification before the event at all.
        assert_eq!(vote(&mut writes, Some(0)), None);
    }

    #[test]
    fn a_posts_own_notifications_are_taken_back_with_its_groups() {
        let seven = ArticleId(7);
        let mut writes = OwnWrites::default();
        // The voted set (SADD, EXPIRE), then each group's set.
        let run = |writes: &mut OwnWrites, groups: &[(&str, bool)]| {
            writes.article(seven, true);
            writes.article(seven, true);
            for (name, queued) in groups {
                writes.group(group(name), *queued);
            }
        };
        run(&mut writes, &[("news", true), ("rust", true)]);
        let got = writes.event(OwnEvent::Post, &posted(7, json!(["rust", "news"])));
        assert_eq!(got, own(7, &["news", "rust"]));
        run(&mut writes, &[]);
        let got = writes.event(OwnEvent::Post, &posted(7, json!({})));
        assert_eq!(got, own(7, &[]), "cjson's empty list");

        // A group the post does not name, one it names missing, one
        // notified twice, one already waiting: derived.
        for (groups, named) in [
            (vec![("news", true), ("rust", true)], json!(["news"])),
            (vec![("news", true)], json!(["news", "rust"])),
            (vec![("news", true), ("news", true)], json!(["news"])),
            (
                vec![("news", true), ("rust", false)],
                json!(["news", "rust"]),
            ),
        ] {
            run(&mut writes, &groups);
            let got = writes.event(OwnEvent::Post, &posted(7, named.clone()));
            assert_eq!(got, None, "{groups:?} against {named}");
        }
        // A group set first, then the article's: not a post's order.
        writes.group(group("news"), true);
        writes.article(seven, true);
        writes.article(seven, true);
        writes.group(group("news"), true);
        writes.article(seven, true);
        assert_eq!(
            writes.event(OwnEvent::Post, &posted(7, json!(["news"]))),
            None
        );
        // More groups than a post may have end the run.
        writes.article(seven, true);
        writes.article(seven, true);
        for n in 0..=GroupName::MAX_PER_ARTICLE {
            writes.group(group(&format!("g{n}")), true);
        }
        assert!(writes.run.is_none());
    }

    #[test]
    fn writes_taken_back_leave_the_queue_and_are_counted() {
        let queue = DeriveQueue::default();
        assert!(queue.touch(Touched::Article(ArticleId(7))));
        assert!(!queue.touch(Touched::Article(ArticleId(7))));
        assert!(queue.touch(Touched::Group(group("news"))));
        assert!(queue.touch(Touched::Group(group("rust"))));
        queue.forget(own(7, &["news"]).unwrap());
        let left = queue.take();
        assert!(left.articles.is_empty());
        assert_eq!(left.groups, HashSet::from([group("rust")]));
        // What the worker already took is derived all the same.
        queue.forget(own(7, &["news"]).unwrap());
        assert_eq!(queue.stats().skipped, 2);
    }

    #[test]
    fn touches_beyond_the_bound_are_dropped_and_counted() {
        let queue = DeriveQueue::default();
        for n in 0..MAX_PENDING_ARTICLES as u64 + 10 {
            let queued = queue.touch(Touched::Article(ArticleId(n + 1)));
            assert_eq!(queued, n < MAX_PENDING_ARTICLES as u64);
        }
        assert_eq!(queue.pending.lock().articles.len(), MAX_PENDING_ARTICLES);
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 10);
        let batch = queue.take();
        assert_eq!(batch.articles.len(), MAX_PENDING_ARTICLES);
        assert!(queue.pending.lock().articles.is_empty());
    }
}
