//! Following every writer of the shared Redis, the book's code included:
//! what its writes change in the book's keys is derived here into the
//! indexes votegraph's own scripts keep with each write. Keyspace
//! notifications name the touched articles and groups; they wait in a
//! bounded queue that coalesces, and are derived by scripts that write only
//! what differs (`scripts/derive.rs`). A full pass over every article and
//! group set runs when something may have been missed: when the listener
//! connects, when the queue is full, when `time:` or `score:` is replaced
//! as a whole. While notifications are refused or down, the upkeep's sweep
//! (see `feeds.rs`) re-derives a batch per round instead. See
//! docs/operations.md, "Following the book's code".

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::Notify;

use super::keys::{self, Touched};
use super::scripts::{self, GroupDerived, GroupMode, TopCursor};
use super::{Conn, Locator, Store};
use crate::domain::{ArticleId, GroupName};
use crate::error::AppResult;
use tokio_util::task::AbortOnDropHandle;

/// How long touched keys wait to be derived together.
pub const COALESCE: Duration = Duration::from_millis(20);

/// Articles waiting at most; a touch past it is dropped (and counted) for
/// a full pass, which derives every article and group set.
pub const MAX_PENDING_ARTICLES: usize = 100_000;

/// Groups waiting at most; likewise.
pub const MAX_PENDING_GROUPS: usize = 10_000;

/// Articles the sweep re-derives per round of upkeep while notifications
/// are not on (one instance per round): every article within
/// `articles / SWEEP_BATCH` rounds.
pub const SWEEP_BATCH: u64 = 2000;

/// Articles per derivation script: Redis runs nothing else while a script
/// runs, so each is kept short (and stops early once it went through
/// [`scripts::SCRIPT_MEMBERS`] groups and voters).
pub const SWEEP_CALL: u64 = 12;

/// Keys one `SCAN` step visits (a command Redis runs alone, like a
/// script).
pub const SCAN_COUNT: u64 = 1000;

/// `SCAN` steps of the group sets per round of the sweep.
const GROUP_SCANS_PER_ROUND: u32 = 10;

/// How long a notified article found missing from `time:` waits before
/// it is derived again: the book writes a post in several commands, its
/// voted set first.
pub const ABSENT_RETRY: Duration = Duration::from_millis(50);

/// How many times such an article is derived again before it is left to
/// the sweep: a second's worth (an article named by a voted set that no
/// post follows, written by hand, is not tried forever).
pub const ABSENT_TRIES: u8 = 20;

/// How long an article whose counts a derivation rewrote waits before it
/// is derived again: another writer's count (the book's `HINCRBY`) may
/// land after the set write that named the article.
pub const RECOUNT_RETRY: Duration = Duration::from_millis(250);

/// Articles whose group sets changed, gathered across groups so each
/// group list is rebuilt once; past this many they are rebuilt at once.
const MAX_RELIST: usize = 10_000;

/// Articles of a batch tried as members of each touched group.
const MAX_CANDIDATES: usize = 256;

/// The notification flags the deriver needs: keyspace channels (`K`),
/// generic commands (`g`: DEL, RESTORE, RENAME, EXPIRE) and sets (`s`).
const NOTIFY_FLAGS: [char; 3] = ['K', 'g', 's'];

/// Whether Redis sends the notifications the deriver follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Notifications {
    /// Not known yet (never connected).
    #[default]
    Starting,
    /// Subscribed, and the server sends them.
    On,
    /// The server's setting lacks the flags and `CONFIG SET` was refused:
    /// the sweep alone follows other writers.
    Refused,
    /// The subscription is down (reconnecting).
    Down,
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

/// What waits to be derived, and how the following goes; shared by the
/// listener, the worker, the sweep and the reads that find an article
/// never derived.
#[derive(Default)]
pub struct DeriveQueue {
    pending: Mutex<Pending>,
    wake: Notify,
    notifications: Mutex<Notifications>,
    /// Notifications received.
    received: AtomicU64,
    /// Touches dropped because the queue was full (a full pass follows).
    dropped: AtomicU64,
    /// Articles and groups whose derived data had to change.
    derived: AtomicU64,
    /// Derivation batches that failed (Redis down); tried again.
    failures: AtomicU64,
    /// Full passes over every article and group set.
    passes: AtomicU64,
    /// Rounds of the sweep (while notifications are not on).
    sweep_rounds: AtomicU64,
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
    pub notifications: Notifications,
    /// Articles and groups waiting to be derived.
    pub pending: usize,
    /// Whether a batch is being derived now.
    pub busy: bool,
    pub received: u64,
    pub derived: u64,
    pub dropped: u64,
    pub failures: u64,
    /// Full passes run (see the module doc).
    pub passes: u64,
    /// Rounds of the sweep run by this instance.
    pub sweep_rounds: u64,
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
            pending.everything = true;
            drop(pending);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.wake.notify_one();
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

    pub fn stats(&self) -> DeriverStats {
        let pending = {
            let pending = self.pending.lock();
            pending.articles.len() + pending.groups.len()
        } + self.retrying.load(Ordering::Relaxed);
        DeriverStats {
            notifications: self.notifications(),
            pending,
            busy: self.busy.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            derived: self.derived.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            passes: self.passes.load(Ordering::Relaxed),
            sweep_rounds: self.sweep_rounds.load(Ordering::Relaxed),
        }
    }

    pub fn notifications(&self) -> Notifications {
        *self.notifications.lock()
    }

    fn set_notifications(&self, state: Notifications) {
        *self.notifications.lock() = state;
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
        self.retry_later(again, ABSENT_RETRY);
    }

    /// Touches `ids` again `after` from now, counting them as pending
    /// meanwhile.
    fn retry_later(self: &Arc<Self>, ids: Vec<ArticleId>, after: Duration) {
        if ids.is_empty() {
            return;
        }
        self.retrying.fetch_add(ids.len(), Ordering::Relaxed);
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            for id in &ids {
                let _ = queue.touch(Touched::Article(*id));
            }
            queue.retrying.fetch_sub(ids.len(), Ordering::Relaxed);
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

/// Articles whose group sets changed, gathered across groups so each group
/// list is rebuilt once; at most [`MAX_RELIST`].
#[derive(Default)]
pub(super) struct Relist(HashSet<ArticleId>);

impl Relist {
    /// Adds `changed`; once the bound is reached, answers every article
    /// gathered (to rebuild now), leaving none.
    fn add(&mut self, changed: Vec<ArticleId>) -> Option<Vec<ArticleId>> {
        self.0.extend(changed);
        (self.0.len() >= MAX_RELIST).then(|| self.0.drain().collect())
    }

    /// Every article gathered; they stay in the set, to be told apart.
    fn take(&mut self) -> Vec<ArticleId> {
        self.0.iter().copied().collect()
    }
}

/// What deriving named articles leaves to try again.
#[derive(Default)]
struct Named {
    /// Missing from `time:` (see [`ABSENT_RETRY`]).
    absent: Vec<ArticleId>,
    /// Counts rewritten (see [`RECOUNT_RETRY`]).
    recounted: Vec<ArticleId>,
}

/// The deriver's tasks; dropping it stops them.
pub struct Deriver {
    _listener: AbortOnDropHandle<()>,
    _worker: AbortOnDropHandle<()>,
}

impl Store {
    /// Starts following other writers (see the module doc).
    pub fn start_deriver(&self) -> Deriver {
        let queue = self.derive.clone();
        let listener = AbortOnDropHandle::new(tokio::spawn(listen(self.locator.clone(), queue)));
        let store = self.clone();
        let worker = AbortOnDropHandle::new(tokio::spawn(async move {
            let queue = store.derive.clone();
            loop {
                queue.wake.notified().await;
                tokio::time::sleep(COALESCE).await;
                let batch = queue.take();
                if batch.is_empty() {
                    // Taken by the batch before (a wake-up left over).
                    queue.done();
                    continue;
                }
                match store.derive_batch(&batch).await {
                    Ok(named) => {
                        queue.retry_absent(&batch, named.absent);
                        queue.retry_later(named.recounted, RECOUNT_RETRY);
                        queue.done();
                    }
                    Err(e) => {
                        queue.put_back(batch);
                        queue.done();
                        queue.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "deriving other clients' writes failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
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
    /// candidates), then articles, those whose group sets changed with
    /// their group lists rebuilt.
    async fn derive_batch(&self, batch: &Pending) -> AppResult<Named> {
        let mut conn = self.conn().await?;
        let articles: Vec<ArticleId> = batch.articles.iter().copied().collect();
        let candidates = &articles[..articles.len().min(MAX_CANDIDATES)];
        let mut relist = Relist::default();
        for name in &batch.groups {
            self.follow_group(&mut conn, name, GroupMode::Check, candidates, &mut relist)
                .await?;
        }
        let mut ordered = relist.take();
        let relisted = ordered.len();
        ordered.extend(articles.iter().filter(|id| !relist.0.contains(id)));
        let named = self.derive_named(&mut conn, &ordered, relisted).await?;
        if batch.everything {
            self.derive_everything(&mut conn).await?;
            self.derive.passes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(named)
    }

    /// Derives the articles `ids`, the first `relist` of them with their
    /// group lists rebuilt, in short scripts.
    async fn derive_named(
        &self,
        conn: &mut Conn,
        ids: &[ArticleId],
        relist: usize,
    ) -> AppResult<Named> {
        let mut named = Named::default();
        let mut to_relist: VecDeque<ArticleId> = ids[..relist].iter().copied().collect();
        let mut plain: VecDeque<ArticleId> = ids[relist..].iter().copied().collect();
        while !to_relist.is_empty() || !plain.is_empty() {
            let first = to_relist.len().min(SWEEP_CALL as usize);
            let mut chunk: Vec<ArticleId> = to_relist.drain(..first).collect();
            let more = plain.len().min(SWEEP_CALL as usize - first);
            chunk.extend(plain.drain(..more));
            let mut derived = scripts::derive_articles(conn, &chunk, first).await?;
            for id in derived.rest_to_relist.drain(..).rev() {
                to_relist.push_front(id);
            }
            for id in derived.rest.drain(..).rev() {
                plain.push_front(id);
            }
            named.absent.append(&mut derived.absent);
            named.recounted.append(&mut derived.recounted);
            self.finish_derived(conn, derived).await?;
        }
        Ok(named)
    }

    /// Gathers the articles whose group sets changed into `relist`, and
    /// rebuilds their group lists at once when it is full.
    async fn relist(
        &self,
        conn: &mut Conn,
        relist: &mut Relist,
        changed: Vec<ArticleId>,
    ) -> AppResult<()> {
        self.count_derived(changed.len() as u64);
        if let Some(ids) = relist.add(changed) {
            self.derive_named(conn, &ids, ids.len()).await?;
        }
        Ok(())
    }

    /// Every article of `time:`, then the articles gone from `time:` leave
    /// the net-vote rankings, then every group set. Each batch is one short
    /// script or command; other clients run between them.
    async fn derive_everything(&self, conn: &mut Conn) -> AppResult<()> {
        self.derive_from(conn, TopCursor::start(), u64::MAX).await?;
        let mut cursor = "0".to_owned();
        loop {
            let batch = scripts::drop_absent(conn, &cursor, SWEEP_CALL).await?;
            self.count_derived(batch.count);
            cursor = batch.next;
            if cursor == "0" {
                break;
            }
        }
        self.derive_groups_from(conn, 0, u32::MAX).await?;
        Ok(())
    }

    /// Derives the articles of `time:` from `at` on, in at most `calls`
    /// scripts of [`SWEEP_CALL`]; answers where the next goes on (None:
    /// past the newest).
    async fn derive_from(
        &self,
        conn: &mut Conn,
        mut at: TopCursor,
        calls: u64,
    ) -> AppResult<Option<TopCursor>> {
        for _ in 0..calls {
            let swept = scripts::sweep_articles(conn, &at, SWEEP_CALL).await?;
            self.finish_derived(conn, swept.derived).await?;
            match swept.next {
                Some(next) => at = next,
                None => return Ok(None),
            }
        }
        Ok(Some(at))
    }

    /// Follows one group until its mirror matches it, scanning large ones
    /// in batches; the articles whose group sets changed go to `relist`.
    pub(super) async fn follow_group(
        &self,
        conn: &mut Conn,
        name: &GroupName,
        mode: GroupMode,
        candidates: &[ArticleId],
        relist: &mut Relist,
    ) -> AppResult<()> {
        let first = scripts::derive_group(conn, name, mode, "0", candidates).await?;
        let synced = matches!(first, GroupDerived::Synced { .. });
        self.relist(conn, relist, first.into_changed()).await?;
        if synced {
            return Ok(());
        }
        for mode in [GroupMode::Add, GroupMode::Remove] {
            let mut cursor = "0".to_owned();
            loop {
                let step = scripts::derive_group(conn, name, mode, &cursor, &[]).await?;
                let next = match &step {
                    GroupDerived::Cursor { next, .. } => next.clone(),
                    _ => "0".to_owned(),
                };
                self.relist(conn, relist, step.into_changed()).await?;
                if next == "0" {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }

    /// Follows the group sets from `SCAN` cursor `cursor` on, at most
    /// `steps` steps; answers the next cursor (0: past the last).
    async fn derive_groups_from(
        &self,
        conn: &mut Conn,
        mut cursor: u64,
        steps: u32,
    ) -> AppResult<u64> {
        for _ in 0..steps {
            cursor = self.derive_groups_step(conn, cursor).await?;
            if cursor == 0 {
                break;
            }
        }
        Ok(cursor)
    }

    /// One round of the sweep: `calls` scripts of articles and
    /// [`GROUP_SCANS_PER_ROUND`] `SCAN` steps of the group sets, from where
    /// `index:sweep` says, moved on (back to the start after the last).
    pub(super) async fn sweep_round(&self, conn: &mut Conn, calls: u64) -> AppResult<()> {
        let (from, skip, groups): (Option<String>, Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(keys::SWEEP)
            .arg(&["from", "skip", "groups"])
            .query_async(&mut *conn)
            .await?;
        let skip = skip.unwrap_or(0);
        let at = from.map_or_else(TopCursor::start, |from| TopCursor { from, skip });
        let at = self.derive_from(conn, at, calls).await?;
        let at = at.unwrap_or_else(TopCursor::start);
        let cursor = groups.unwrap_or(0);
        let cursor = self
            .derive_groups_from(conn, cursor, GROUP_SCANS_PER_ROUND)
            .await?;
        let () = redis::cmd("HSET")
            .arg(keys::SWEEP)
            .arg(&[("from", at.from), ("skip", at.skip.to_string())])
            .arg("groups")
            .arg(cursor)
            .query_async(conn)
            .await?;
        self.derive.sweep_rounds.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// One `SCAN` step of the group sets from `cursor`: each group
    /// set found is compared whole with its mirror, and so is each mirror
    /// whose group set is gone (emptied while nothing followed it, which
    /// no scan of the group sets finds). Answers the next cursor (0 at the
    /// end).
    async fn derive_groups_step(&self, conn: &mut Conn, cursor: u64) -> AppResult<u64> {
        let (next, found) = scan(conn, cursor, keys::GROUP_PREFIX, "set").await?;
        let (mut groups, mut mirrored) = (Vec::new(), Vec::new());
        for key in &found {
            let mirror = key.strip_suffix(keys::GROUP_INDEXED_SUFFIX);
            if let Some(Touched::Group(name)) = keys::touched(mirror.unwrap_or(key)) {
                let found = if mirror.is_some() {
                    &mut mirrored
                } else {
                    &mut groups
                };
                found.push(name);
            }
        }
        if !mirrored.is_empty() {
            let mut exists = redis::pipe();
            for name in &mirrored {
                exists.cmd("EXISTS").arg(keys::group(name));
            }
            let exist: Vec<bool> = exists.query_async(&mut *conn).await?;
            let gone = mirrored.into_iter().zip(exist).filter(|(_, e)| !e);
            groups.extend(gone.map(|(name, _)| name));
        }
        let mut relist = Relist::default();
        for name in groups {
            self.follow_group(conn, &name, GroupMode::Full, &[], &mut relist)
                .await?;
        }
        let ids = relist.take();
        self.derive_named(conn, &ids, ids.len()).await?;
        Ok(next)
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
        self.derive.derived.fetch_add(n, Ordering::Relaxed);
    }
}

/// One `SCAN` step from `cursor` over the keys of type `ty` under
/// `prefix`: the next cursor (0 at the end) and the keys found.
pub(super) async fn scan(
    conn: &mut Conn,
    cursor: u64,
    prefix: &str,
    ty: &str,
) -> AppResult<(u64, Vec<String>)> {
    let mut scan = redis::cmd("SCAN");
    scan.arg(cursor).arg("MATCH").arg(format!("{prefix}*"));
    scan.arg("COUNT").arg(SCAN_COUNT).arg("TYPE").arg(ty);
    Ok(scan.query_async(conn).await?)
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
        match subscribe(&locator, db).await {
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
                // Whatever was written while no subscription was up.
                let _ = queue.touch(Touched::Everything);
                follow(pubsub, &queue, db).await;
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

/// Subscribes to the keyspace notifications the deriver follows, after
/// trying to turn them on; answers whether the server let it.
async fn subscribe(
    locator: &Locator,
    db: i64,
) -> Result<(Result<(), redis::RedisError>, redis::aio::PubSub), redis::RedisError> {
    let client = locator.client().await?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let enabled = enable_notifications(&mut conn).await;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.psubscribe(keys::keyspace_patterns(db)).await?;
    Ok((enabled, pubsub))
}

/// Queues what each notification names, until the connection closes.
async fn follow(pubsub: redis::aio::PubSub, queue: &DeriveQueue, db: i64) {
    let mut messages = pubsub.into_on_message();
    while let Some(message) = messages.next().await {
        queue.received.fetch_add(1, Ordering::Relaxed);
        let event: String = message.get_payload().unwrap_or_default();
        if let Some(touched) = keys::notified_key(message.get_channel_name(), db)
            .and_then(|key| keys::notified(key, &event))
        {
            let _ = queue.touch(touched);
        }
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
    use super::*;

    #[test]
    fn notification_flags_are_added_to_the_ones_set() {
        assert_eq!(with_flags(""), "Kgs");
        assert_eq!(with_flags("Ex"), "ExKgs");
        assert_eq!(with_flags("KA"), "KA");
        assert_eq!(with_flags("Egsh"), "EgshK");
    }

    #[test]
    fn articles_to_relist_are_rebuilt_at_the_bound() {
        let mut relist = Relist::default();
        let ids = |from: u64, n: u64| (from..from + n).map(ArticleId).collect::<Vec<_>>();
        assert_eq!(relist.add(ids(1, MAX_RELIST as u64 - 1)), None);
        assert_eq!(relist.add(ids(1, 10)), None, "each article once");
        let rebuilt = relist.add(ids(MAX_RELIST as u64, 1)).expect("at the bound");
        assert_eq!(rebuilt.len(), MAX_RELIST);
        assert!(relist.take().is_empty());
    }

    #[test]
    fn touches_beyond_the_bound_are_dropped_for_a_full_pass() {
        let queue = DeriveQueue::default();
        for n in 0..MAX_PENDING_ARTICLES as u64 + 10 {
            let queued = queue.touch(Touched::Article(ArticleId(n + 1)));
            assert_eq!(queued, n < MAX_PENDING_ARTICLES as u64);
        }
        assert_eq!(queue.pending.lock().articles.len(), MAX_PENDING_ARTICLES);
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 10);
        let batch = queue.take();
        assert_eq!(batch.articles.len(), MAX_PENDING_ARTICLES);
        assert!(batch.everything, "what was dropped waits for a full pass");
        assert!(queue.pending.lock().articles.is_empty());
    }
}
