//! The in-process cache of whole responses to anonymous queries, and of
//! logged-in queries' templates (`templates.rs`); its rules are in
//! docs/api.md, "Cached pages".
//!
//! Each entry records what it shows ([`Deps`]), so a vote drops only what
//! it may change; any other write through this instance drops everything.
//! A response is stored only if nothing that drops it happened while it was
//! computed (a generation counter, and the last [`RECENT_VOTES`] votes).
//! Full, it evicts the least recently used entries: an `lru` list, since
//! `quick_cache`'s CLOCK-Pro keeps a filling cache's first entries while
//! new ones churn.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use lru::LruCache;
use parking_lot::Mutex;
use std::time::{Duration, Instant};

use crate::compression::{Encoding, Level};
use crate::pubsub::ScoreEvent;
use crate::templates::Template;

mod flight;
use flight::Flights;
pub(crate) use flight::{Computation, Flight};

pub(crate) const MAX_AGE: Duration = Duration::from_secs(1);
/// Past this age an entry is computed again ahead of its expiry.
const REFRESH_AFTER: Duration = Duration::from_millis(750);
/// Past this many entries the least recently used one is evicted.
const MAX_ENTRIES: usize = 4096;
/// Default for the bytes the cache may hold (see [`Entries::footprint`]).
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;

/// What a cached response shows that a vote can change.
#[derive(Debug, Default, Clone)]
pub(crate) struct Deps {
    /// Ids of the articles shown.
    ids: HashSet<String>,
    /// The score-ordered pages shown.
    windows: Vec<Window>,
    /// Shows something any vote may change (karma, ranks).
    any_vote: bool,
}

#[derive(Debug, Clone)]
struct Window {
    /// Only votes on articles of this group can move it; None: any article.
    group: Option<String>,
    /// Lowest score on the page; -∞ when it is not full (an article rising
    /// from anywhere below may join it).
    min: f64,
    max: f64,
}

impl Window {
    /// Whether the article of `event` may join the page.
    fn reachable(&self, event: &ScoreEvent) -> bool {
        let in_scope = self
            .group
            .as_ref()
            .is_none_or(|g| event.groups.iter().any(|e| e == g));
        let below = event.score + MAX_SCORE_STEP < self.min;
        let above = event.score - MAX_SCORE_STEP > self.max;
        in_scope && !below && !above
    }
}

/// A vote moves a score by at most two votes' worth (a switch, 2 × 432).
const MAX_SCORE_STEP: f64 = 864.0;

impl Deps {
    pub fn article(&mut self, id: &str) {
        if !self.ids.contains(id) {
            self.ids.insert(id.to_owned());
        }
    }

    /// A page of a score ranking (of `group`, or of the whole site): the
    /// scores of its articles; `full` when it holds as many as it could.
    pub(crate) fn score_window(
        &mut self,
        group: Option<&str>,
        scores: impl IntoIterator<Item = f64>,
        full: bool,
    ) {
        let (min, max) = scores
            .into_iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), s| {
                (lo.min(s), hi.max(s))
            });
        self.windows.push(Window {
            group: group.map(str::to_owned),
            min: if full { min } else { f64::NEG_INFINITY },
            max,
        });
    }

    pub(crate) fn any_vote(&mut self) {
        self.any_vote = true;
    }

    /// Whether the vote behind `event` can change the response: not when
    /// its article stays wholly above or below every page's window.
    fn affected_by(&self, event: &ScoreEvent) -> bool {
        self.any_vote
            || self.ids.contains(&event.id)
            || self.windows.iter().any(|w| w.reachable(event))
    }
}

/// The collector a request carries while it may be cached.
pub(crate) type DepsCollector = Arc<Mutex<Deps>>;

struct Entry {
    generation: u64,
    stored: Instant,
    cached: Arc<Cached>,
    deps: Deps,
    /// Its footprint when stored (see [`Entries::footprint`]).
    size: usize,
}

/// A response body as it is served, with its `ETag`'s tag and compressed
/// forms, each made when first asked for and then kept.
#[derive(Debug)]
pub struct Cached {
    body: bytes::Bytes,
    /// No errors: only such responses are cached, here or by HTTP caches.
    ok: bool,
    tag: OnceLock<String>,
    encoded: Mutex<[Option<bytes::Bytes>; 3]>,
    /// What a logged-in query's entry holds instead of a body to serve.
    kind: EntryKind,
}

#[derive(Debug)]
enum EntryKind {
    Anonymous,
    /// A logged-in query's template, whose anonymous form is the body.
    Template(Template),
    /// A logged-in query that reads who the caller is: it runs whole.
    NotTemplatable,
}

/// Length of a [`Cached::tag`]: 128 bits in hex.
const TAG_LEN: usize = 32;

impl Cached {
    /// The body of a response without errors.
    pub fn new(body: bytes::Bytes) -> Self {
        Self {
            body,
            ok: true,
            tag: OnceLock::new(),
            encoded: Mutex::new([None, None, None]),
            kind: EntryKind::Anonymous,
        }
    }

    /// A logged-in query's template; its body is the anonymous form.
    pub(crate) fn template(template: Template) -> Self {
        Self {
            body: template.anonymous(),
            kind: EntryKind::Template(template),
            ..Self::new(bytes::Bytes::new())
        }
    }

    /// A logged-in query that cannot be a template.
    pub(crate) fn not_templatable() -> Self {
        Self {
            kind: EntryKind::NotTemplatable,
            ..Self::new(bytes::Bytes::new())
        }
    }

    pub(crate) fn as_template(&self) -> Option<&Template> {
        match &self.kind {
            EntryKind::Template(t) => Some(t),
            _ => None,
        }
    }

    /// Bytes held by the body (and a template's hole list).
    fn size(&self) -> usize {
        match &self.kind {
            EntryKind::Template(t) => t.size(),
            _ => self.body.len(),
        }
    }

    /// The body of a response with errors: served, never cached.
    pub fn failed(body: bytes::Bytes) -> Self {
        Self {
            ok: false,
            ..Self::new(body)
        }
    }

    pub fn body(&self) -> &bytes::Bytes {
        &self.body
    }

    pub fn ok(&self) -> bool {
        self.ok
    }

    /// The first 128 bits of the body's SHA-256, in hex, computed once.
    pub fn tag(&self) -> &str {
        self.tag.get_or_init(|| {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(&self.body);
            hex::encode(&digest[..TAG_LEN / 2])
        })
    }

    fn encoded(&self, encoding: Encoding) -> Option<bytes::Bytes> {
        self.encoded.lock()[encoding as usize].clone()
    }

    /// Bytes held by the compressed forms.
    fn encoded_bytes(&self) -> usize {
        self.encoded.lock().iter().flatten().map(|b| b.len()).sum()
    }
}

/// Where the cache stood when a response started to be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    generation: u64,
    votes_seen: u64,
}

/// Votes remembered to check responses computed while they happened.
const RECENT_VOTES: usize = 1024;

/// Votes seen so far, and the last [`RECENT_VOTES`] of them.
#[derive(Default)]
struct Votes {
    count: u64,
    recent: VecDeque<Arc<ScoreEvent>>,
}

/// The entries, least recently used first, indexed so that a vote need
/// not look at every entry.
struct Entries {
    map: LruCache<String, Entry>,
    /// Article id → keys of entries showing it.
    by_article: HashMap<String, HashSet<String>>,
    /// Keys of entries with score windows or karma, checked on every vote.
    checked_by_every_vote: HashSet<String>,
    /// Footprints and compressed forms held.
    bytes: usize,
}

impl Default for Entries {
    fn default() -> Self {
        Self {
            map: LruCache::unbounded(),
            by_article: HashMap::new(),
            checked_by_every_vote: HashSet::new(),
            bytes: 0,
        }
    }
}

impl Entries {
    /// What storing `entry` under `key` costs in bytes: the body, the key
    /// and its copies in the indexes, and a guess at the rest.
    fn footprint(key: &str, entry: &Entry) -> usize {
        let copies = 1 + entry.deps.ids.len() + 1;
        entry.cached.size() + TAG_LEN + key.len() * copies + entry.deps.ids.len() * 16 + 160
    }

    fn insert(&mut self, key: String, mut entry: Entry, max_bytes: usize) {
        let size = Self::footprint(&key, &entry);
        if size > max_bytes / 16 {
            // One response may not take a large share of the cache.
            return;
        }
        self.remove(&key);
        while !self.map.is_empty()
            && (self.map.len() >= MAX_ENTRIES || self.bytes + size > max_bytes)
        {
            if let Some((oldest, _)) = self.map.peek_lru() {
                let oldest = oldest.clone();
                self.remove(&oldest);
            }
        }
        for id in &entry.deps.ids {
            self.by_article
                .entry(id.clone())
                .or_default()
                .insert(key.clone());
        }
        if entry.deps.any_vote || !entry.deps.windows.is_empty() {
            self.checked_by_every_vote.insert(key.clone());
        }
        entry.size = size;
        self.bytes += size;
        self.map.put(key, entry);
    }

    /// Removes `key`'s entry and every index's copy of its key.
    fn remove(&mut self, key: &str) -> Option<Entry> {
        let entry = self.map.pop(key)?;
        for id in &entry.deps.ids {
            if let Some(keys) = self.by_article.get_mut(id) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_article.remove(id);
                }
            }
        }
        self.checked_by_every_vote.remove(key);
        let held = entry.size + entry.cached.encoded_bytes();
        self.bytes = self.bytes.saturating_sub(held);
        Some(entry)
    }

    /// Removes the entries `event` may change; how many.
    fn vote(&mut self, event: &ScoreEvent) -> usize {
        let mut affected: Vec<String> = self
            .by_article
            .get(&event.id)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default();
        affected.extend(
            self.checked_by_every_vote
                .iter()
                .filter(|key| {
                    self.map
                        .peek(key.as_str())
                        .is_some_and(|entry| entry.deps.affected_by(event))
                })
                .cloned(),
        );
        affected
            .iter()
            .filter(|key| self.remove(key).is_some())
            .count()
    }
}

#[derive(Default)]
pub struct ResponseCache {
    /// Lock order: `votes`, then `entries`.
    votes: Mutex<Votes>,
    /// Responses being computed, by key, for requests that miss together.
    flights: Flights,
    /// Bytes the entries may hold (see [`Entries::footprint`]).
    max_bytes: usize,
    entries: Mutex<Entries>,
    generation: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    invalidations: AtomicU64,
    evictions: AtomicU64,
    /// Compressed forms made (see [`ResponseCache::encoded`]).
    compressions: AtomicU64,
}

impl ResponseCache {
    /// An empty cache of at most `max_bytes`, fed the score events by its
    /// owner (`startup`).
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            ..Self::default()
        }
    }

    /// Read it before computing a response to cache.
    pub(crate) fn position(&self) -> Position {
        let votes = self.votes.lock();
        Position {
            generation: self.generation.load(Ordering::Acquire),
            votes_seen: votes.count,
        }
    }

    /// Drops everything (any write but a vote).
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        *self.entries.lock() = Entries::default();
        self.invalidations.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops the responses a vote may change.
    pub fn vote(&self, event: Arc<ScoreEvent>) {
        let mut votes = self.votes.lock();
        let removed = self.entries.lock().vote(&event);
        self.evictions.fetch_add(removed as u64, Ordering::Relaxed);
        votes.count += 1;
        votes.recent.push_back(event);
        if votes.recent.len() > RECENT_VOTES {
            votes.recent.pop_front();
        }
    }

    #[cfg(test)]
    pub fn get(&self, key: &str) -> Option<Arc<Cached>> {
        let hit = self.fresh_entry(key).map(|(cached, _)| cached);
        self.count_lookup(hit.is_some());
        hit
    }

    /// The entry under `key` while it is fresh, with its age.
    fn fresh_entry(&self, key: &str) -> Option<(Arc<Cached>, Duration)> {
        let generation = self.generation.load(Ordering::Acquire);
        let mut entries = self.entries.lock();
        let age = entries
            .map
            .peek(key)
            .map(|e| (e.generation == generation, e.stored.elapsed()));
        match age {
            Some((true, age)) if age < MAX_AGE => {
                entries.map.get(key).map(|e| (e.cached.clone(), age))
            }
            Some(_) => {
                // Expired: its bytes go now, not when it is evicted.
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn count_lookup(&self, hit: bool) {
        let counter = if hit { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The entry under `key`: a hit, or the body a concurrent computation
    /// lands within `patience`; else the caller computes it, as the leader
    /// others wait for (`Some`), or alone (`None`: the leader gave up).
    /// Past [`REFRESH_AFTER`] one reader computes the entry again while the
    /// others are served it: readers do not queue behind an expiring page.
    pub(crate) async fn lookup(
        &self,
        key: &str,
        patience: Duration,
    ) -> Result<Arc<Cached>, Option<Computation>> {
        if let Some((hit, age)) = self.fresh_entry(key) {
            if age >= REFRESH_AFTER {
                if let Some(computation) = self.flights.compute_alone(key, self.position()) {
                    self.count_lookup(false);
                    return Err(Some(computation));
                }
            }
            self.count_lookup(true);
            return Ok(hit);
        }
        self.count_lookup(false);
        match self.flight(key) {
            Flight::Compute(computation) => Err(Some(computation)),
            Flight::Wait(waiter) => waiter.wait(patience).await.ok_or(None),
        }
    }

    /// Joins the computation of `key`'s response, or leads it (see
    /// [`Flight`]). Call after a miss.
    pub(crate) fn flight(&self, key: &str) -> Flight {
        self.flights.join(key, self.position())
    }

    /// `cached` compressed with `encoding`: the form kept with the entry,
    /// else made now (outside the locks) and kept while `cached` is the
    /// entry under `key` and the byte budget has room. None if the codec
    /// failed.
    pub fn encoded(
        &self,
        key: &str,
        cached: &Arc<Cached>,
        encoding: Encoding,
    ) -> Option<bytes::Bytes> {
        if let Some(form) = cached.encoded(encoding) {
            return Some(form);
        }
        let form = encoding.compress(&cached.body, Level::Fast)?;
        self.compressions.fetch_add(1, Ordering::Relaxed);
        let mut entries = self.entries.lock();
        let current = entries
            .map
            .peek(key)
            .is_some_and(|e| Arc::ptr_eq(&e.cached, cached));
        if current && entries.bytes + form.len() <= self.max_bytes {
            let mut forms = cached.encoded.lock();
            if forms[encoding as usize].is_none() {
                forms[encoding as usize] = Some(form.clone());
                entries.bytes += form.len();
            }
        }
        Some(form)
    }

    /// Stores a response computed from `start` on, unless something it
    /// depends on changed meanwhile.
    pub(crate) fn put(&self, key: String, start: Position, deps: Deps, cached: Arc<Cached>) {
        let votes = self.votes.lock();
        if start.generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        let missed = (votes.count - start.votes_seen) as usize;
        if missed > votes.recent.len() {
            return;
        }
        let skip = votes.recent.len() - missed;
        if votes.recent.iter().skip(skip).any(|e| deps.affected_by(e)) {
            return;
        }
        self.entries.lock().insert(
            key,
            Entry {
                generation: start.generation,
                stored: Instant::now(),
                cached,
                deps,
                size: 0,
            },
            self.max_bytes,
        );
    }

    pub fn stats(&self) -> CacheStats {
        let (entries, bytes) = {
            let e = self.entries.lock();
            (e.map.len(), e.bytes)
        };
        CacheStats {
            entries: entries as u64,
            bytes: bytes as u64,
            max_bytes: self.max_bytes as u64,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            invalidations: self.invalidations.load(Ordering::Relaxed),
            evicted_by_votes: self.evictions.load(Ordering::Relaxed),
            compressions: self.compressions.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheStats {
    pub entries: u64,
    pub bytes: u64,
    pub max_bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub invalidations: u64,
    pub evicted_by_votes: u64,
    pub compressions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_distinct_queries_evicts_the_least_used_not_the_hot_page() {
        let cache = ResponseCache::new(1024 * 1024);
        put(&cache, "front page", cached(vec![b'f'; 20_000]));
        for i in 0..(2 * MAX_ENTRIES) {
            put(
                &cache,
                &format!("one-off {i}"),
                cached(vec![b'x'; 1_000 + i % 7]),
            );
            if i % 100 == 0 {
                assert!(cache.get("front page").is_some(), "evicted after {i}");
            }
            let entries = cache.entries.lock();
            assert!(entries.map.len() <= MAX_ENTRIES);
            assert!(entries.bytes <= 1024 * 1024);
        }
        assert!(cache.get("front page").is_some());
        assert!(cache.get("one-off 0").is_none(), "the oldest went first");
        assert!(cache
            .get(&format!("one-off {}", 2 * MAX_ENTRIES - 1))
            .is_some());
    }

    #[test]
    fn the_response_cache_is_bounded_in_bytes() {
        let cache = ResponseCache::new(1024 * 1024);
        // Bodies that barely compress, so their forms weigh too.
        let noise: Vec<u8> = (0..30_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for i in 0..200 {
            let key = format!("k{i}");
            let mut body = noise.clone();
            body[0] = i as u8;
            let cached = cached(body);
            put(&cache, &key, cached.clone());
            for encoding in Encoding::ALL {
                cache.encoded(&key, &cached, encoding);
            }
            assert!(cache.entries.lock().bytes <= 1024 * 1024);
        }
        assert!(cache.get("k199").is_some(), "recent entries are kept");
        // An entry larger than a sixteenth of the budget is not kept at all.
        put(&cache, "huge", cached(vec![b'x'; 100_000]));
        assert!(cache.get("huge").is_none());
    }

    #[test]
    fn compressed_forms_are_made_once_and_kept_with_the_entry() {
        let cache = ResponseCache::new(DEFAULT_MAX_BYTES);
        let text = br#"{"data":{"articles":[{"id":"1"}]}}"#.repeat(100);
        let kept = cached(text);
        put(&cache, "k", kept.clone());
        let before = cache.entries.lock().bytes;
        let first = cache.encoded("k", &kept, Encoding::Br).unwrap();
        assert!(first.len() < kept.body().len() / 10);
        let after = cache.entries.lock().bytes;
        assert_eq!(after, before + first.len(), "the form is counted");
        // The second request gets the very same bytes, not a new compression.
        let second = cache
            .encoded("k", &cache.get("k").unwrap(), Encoding::Br)
            .unwrap();
        assert_eq!(first.as_ptr(), second.as_ptr());
        // A body that is no longer the entry's is compressed but not kept.
        let stray = cached(vec![b'y'; 5_000]);
        cache.encoded("k", &stray, Encoding::Gzip);
        assert!(stray.encoded(Encoding::Gzip).is_none());
        assert_eq!(cache.entries.lock().bytes, after);
    }

    fn cached(body: impl Into<bytes::Bytes>) -> Arc<Cached> {
        Arc::new(Cached::new(body.into()))
    }

    /// Stores `cached` under `key`, computed from now on.
    fn put(cache: &ResponseCache, key: &str, cached: Arc<Cached>) {
        cache.put(key.to_owned(), cache.position(), Deps::default(), cached);
    }

    fn vote(id: &str, score: f64, groups: &[&str]) -> Arc<ScoreEvent> {
        Arc::new(ScoreEvent {
            id: id.into(),
            score,
            votes: 1,
            downvotes: 0,
            at: 0.0,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
    }

    #[tokio::test]
    async fn concurrent_misses_share_one_computation() {
        let cache = ResponseCache::new(DEFAULT_MAX_BYTES);
        let Flight::Compute(computation) = cache.flight("k") else {
            panic!("the first miss leads");
        };
        let Flight::Wait(waiter) = cache.flight("k") else {
            panic!("a second miss follows");
        };
        let waiting = tokio::spawn(waiter.wait(Duration::from_secs(5)));
        computation.publish(cached("page"));
        let landed = waiting.await.unwrap().unwrap();
        assert_eq!(landed.body().as_ref(), b"page");
        // Landed and dropped: the next miss leads again.
        assert!(matches!(cache.flight("k"), Flight::Compute(_)));

        // A leader that gives up lets its followers compute for themselves.
        let Flight::Compute(computation) = cache.flight("g") else {
            panic!()
        };
        let Flight::Wait(waiter) = cache.flight("g") else {
            panic!()
        };
        drop(computation);
        assert!(waiter.wait(Duration::from_secs(5)).await.is_none());

        // After a vote, a miss does not join a computation that started
        // before it: it leads its own.
        let Flight::Compute(_before) = cache.flight("v") else {
            panic!()
        };
        cache.vote(vote("1", 0.0, &[]));
        assert!(matches!(cache.flight("v"), Flight::Compute(_)));
    }

    #[tokio::test]
    async fn an_ageing_entry_is_computed_again_by_one_reader_while_the_others_are_served() {
        let cache = ResponseCache::new(DEFAULT_MAX_BYTES);
        put(&cache, "k", cached("old"));
        let patience = Duration::from_millis(10);
        assert!(cache.lookup("k", patience).await.is_ok());
        std::thread::sleep(REFRESH_AFTER);
        let computation = match cache.lookup("k", patience).await {
            Err(Some(computation)) => computation,
            _ => panic!("the first reader past the refresh age computes it"),
        };
        for _ in 0..3 {
            let served = cache
                .lookup("k", patience)
                .await
                .ok()
                .expect("served meanwhile");
            assert_eq!(served.body().as_ref(), b"old");
        }
        put(&cache, "k", cached("new"));
        computation.publish(cached("new"));
        let served = cache.lookup("k", patience).await.ok().unwrap();
        assert_eq!(served.body().as_ref(), b"new");
    }

    #[test]
    fn entries_die_with_their_generation() {
        let cache = ResponseCache::new(DEFAULT_MAX_BYTES);
        let start = cache.position();
        cache.put("k".into(), start, Deps::default(), cached("1"));
        assert_eq!(cache.get("k").unwrap().body().as_ref(), b"1");
        cache.invalidate();
        assert!(cache.get("k").is_none());
        // A response computed before an invalidation is not stored.
        cache.put("k".into(), start, Deps::default(), cached("2"));
        assert!(cache.get("k").is_none());
    }

    #[test]
    fn a_vote_drops_only_what_it_can_change() {
        let cache = ResponseCache::new(DEFAULT_MAX_BYTES);
        let start = cache.position();
        // A full front page with scores 10,000..20,000 showing articles 1 and 2.
        let mut front = Deps::default();
        front.article("1");
        front.article("2");
        front.score_window(None, [20_000.0, 10_000.0], true);
        cache.put("front".into(), start, front, cached("f"));
        // A group page, not full.
        let mut group = Deps::default();
        group.article("3");
        group.score_window(Some("rust"), [5_000.0], false);
        cache.put("group".into(), start, group, cached("g"));
        let mut karma = Deps::default();
        karma.any_vote();
        cache.put("karma".into(), start, karma, cached("k"));

        // Far below the front page, outside the group: only karma changes.
        cache.vote(vote("9", 1_000.0, &[]));
        assert!(cache.get("front").is_some());
        assert!(cache.get("group").is_some());
        assert!(cache.get("karma").is_none());
        // Below the front page, in the group (its window is open below).
        cache.vote(vote("9", 1_000.0, &["rust"]));
        assert!(cache.get("group").is_none());
        assert!(cache.get("front").is_some());
        // Close under the front page's lowest score: it may rise into it.
        cache.vote(vote("9", 9_500.0, &[]));
        assert!(cache.get("front").is_none());

        // An article on the page, even with an unchanged rank.
        let mut front = Deps::default();
        front.article("1");
        front.score_window(None, [20_000.0, 10_000.0], true);
        cache.put("front".into(), cache.position(), front.clone(), cached("f"));
        cache.vote(vote("1", 50_000.0, &[]));
        assert!(cache.get("front").is_none());
        // Wholly above the page before and after: no change.
        cache.put("front".into(), cache.position(), front.clone(), cached("f"));
        cache.vote(vote("7", 30_000.0, &[]));
        assert!(cache.get("front").is_some());
    }

    #[test]
    fn a_vote_during_computation_keeps_the_response_out() {
        let cache = ResponseCache::new(DEFAULT_MAX_BYTES);
        let start = cache.position();
        let mut deps = Deps::default();
        deps.article("1");
        cache.vote(vote("1", 0.0, &[]));
        cache.put("k".into(), start, deps.clone(), cached("stale"));
        assert!(cache.get("k").is_none());
        // An unrelated vote meanwhile does not.
        let start = cache.position();
        cache.vote(vote("2", 0.0, &[]));
        cache.put("k".into(), start, deps, cached("fresh"));
        assert!(cache.get("k").is_some());
    }
}
