//! Feeds: pages of a ranking that start after a position (cursors), the
//! net-vote rankings of the `TOP_*` orders, and the background work that
//! keeps those rankings to their periods and in step with the book's keys.
//!
//! **Positions, not offsets.** A cursor holds the last article's ranking
//! value and member, so the next page starts right below it however many
//! votes moved other articles meanwhile (see docs/api.md, "The cursor
//! guarantee").
//!
//! **Net-vote rankings.** `top:<period>` ranks the articles posted within
//! the period by net votes × 2^32 + post time (whole seconds): net votes
//! first, newest first among equals, and the post time readable from the
//! score. The post and vote scripts keep them; they are derived data of the
//! book's `score:` and `time:` (net votes = (score − time) / 432), so the
//! deriver derives them for any article another client writes (see
//! `deriver.rs`), and every round of upkeep, each instance prunes articles
//! that grew too old for a period.

use std::time::Duration;

use super::deriver::{Notifications, SWEEP_BATCH, SWEEP_CALL};

use super::keys;
use super::scripts::{self, FeedReply, FeedSource, ScriptReply, Start};
use super::shards::SliceRead;
use super::{unix_secs, Conn, Ranked, Store};
use crate::domain::{ArticleId, GroupName};
use crate::domain::{Period, Ranking};
use crate::error::{AppError, AppResult};
use tokio_util::task::AbortOnDropHandle;

/// How a list is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Score,
    Time,
    Top(Period),
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Score => "score",
            Order::Time => "newest",
            Order::Top(p) => match p {
                Period::Day => "top-day",
                Period::Week => "top-week",
                Period::Month => "top-month",
                Period::Year => "top-year",
                Period::All => "top-all",
            },
        }
    }
}

/// Which articles a feed ranks.
#[derive(Debug, Clone, Copy)]
pub enum List<'a> {
    Site,
    Group(&'a GroupName),
    User(&'a str),
    /// The moderators' queue, by flags (in any order: it has one).
    Queue,
}

impl List<'_> {
    fn name(&self) -> String {
        match self {
            List::Site => "site".to_owned(),
            List::Group(g) => format!("group:{}", g.as_str()),
            List::User(u) => format!("user:{u}"),
            List::Queue => "queue".to_owned(),
        }
    }

    /// The ranking a feed of this list in `order` reads, and how a cached
    /// one is built when missing.
    fn source(&self, order: Order) -> FeedSource {
        let min_time = match order {
            Order::Top(p) => p.secs().map_or(0, |secs| unix_secs().saturating_sub(secs)),
            _ => 0,
        };
        let marker = match (self, order) {
            (List::Group(g), Order::Top(_)) => Some(keys::group_cached(g)),
            (List::User(u), Order::Top(_) | Order::Score) => Some(keys::user_cached(u)),
            _ => None,
        };
        let (key, build) = match (self, order) {
            (List::Queue, _) => (keys::MODERATION_QUEUE.to_owned(), None),
            (List::Site, Order::Score) => (keys::SCORE.to_owned(), None),
            (List::Site, Order::Time) => (keys::TIME.to_owned(), None),
            (List::Site, Order::Top(p)) => (keys::top(p), None),
            (List::Group(g), Order::Score | Order::Time) => {
                let ranking = if order == Order::Score {
                    Ranking::Score
                } else {
                    Ranking::Time
                };
                (
                    keys::group_ranking(g, ranking),
                    Some((keys::ranking_key(ranking).to_owned(), keys::group(g))),
                )
            }
            (List::Group(g), Order::Top(p)) => {
                (keys::group_top(g, p), Some((keys::top(p), keys::group(g))))
            }
            (List::User(u), Order::Score) => (
                keys::user_articles(u, Ranking::Score),
                Some((
                    keys::SCORE.to_owned(),
                    keys::user_articles(u, Ranking::Time),
                )),
            ),
            (List::User(u), Order::Time) => (keys::user_articles(u, Ranking::Time), None),
            (List::User(u), Order::Top(p)) => (
                keys::user_top(u, p),
                Some((keys::top(p), keys::user_articles(u, Ranking::Time))),
            ),
        };
        FeedSource {
            key,
            build,
            min_time,
            marker,
        }
    }
}

/// Where a page of a feed ended: its last article's ranking value and id.
#[derive(Debug, Clone, PartialEq)]
pub struct Position {
    value: f64,
    id: ArticleId,
}

/// An opaque cursor: the position, and the order and list it belongs to,
/// so a cursor of another feed is refused rather than misread.
pub struct Cursor;

impl Cursor {
    pub fn encode(order: Order, list: &List<'_>, position: &Position) -> String {
        encode_cursor(&[
            order.name(),
            &list.name(),
            &format!("{:?}", position.value),
            &position.id.to_string(),
        ])
    }

    /// The position in `cursor`, if it is one of this order and list.
    pub fn decode(cursor: &str, order: Order, list: &List<'_>) -> AppResult<Position> {
        let fields = cursor_fields(cursor)?;
        let [their_order, their_list, value, id] = fields.as_slice() else {
            return Err(malformed_cursor());
        };
        if *their_order != order.name() {
            return Err(AppError::bad_input(
                "after",
                "the cursor belongs to a feed in another order",
            ));
        }
        if *their_list != list.name() {
            return Err(AppError::bad_input(
                "after",
                "the cursor belongs to another feed",
            ));
        }
        let value = cursor_value(value)?;
        let id: u64 = id.parse().map_err(|_| malformed_cursor())?;
        Ok(Position {
            value,
            id: ArticleId(id),
        })
    }
}

/// Every cursor's format, articles' and groups': the hex of a version and
/// the cursor's fields, one per line (no field holds a line break).
const CURSOR_VERSION: &str = "v1";

pub(super) fn encode_cursor(fields: &[&str]) -> String {
    hex::encode([&[CURSOR_VERSION], fields].concat().join("\n"))
}

/// The fields of a cursor in this format (the version left out).
pub(super) fn cursor_fields(cursor: &str) -> AppResult<Vec<String>> {
    let bytes = hex::decode(cursor).map_err(|_| malformed_cursor())?;
    let text = String::from_utf8(bytes).map_err(|_| malformed_cursor())?;
    let mut fields = text.split('\n');
    if fields.next() != Some(CURSOR_VERSION) {
        return Err(malformed_cursor());
    }
    Ok(fields.map(str::to_owned).collect())
}

pub(super) fn malformed_cursor() -> AppError {
    AppError::bad_input("after", "the cursor is malformed")
}

/// A ranking value as a cursor wrote it (Rust's shortest exact form).
pub(super) fn cursor_value(text: &str) -> AppResult<f64> {
    text.parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(malformed_cursor)
}

/// One page of a feed.
#[derive(Debug)]
pub struct FeedPage {
    /// The articles (with the score when the ranking is by score, which
    /// spares reading it again) and each one's position.
    pub entries: Vec<(Ranked, Position)>,
    pub has_next: bool,
    /// Articles in the list (for `TOP_*`, those not pruned yet: at most a
    /// second's worth of posts more than the period holds).
    pub total: u64,
}

/// Articles the pruning removes per script: Redis runs nothing else
/// while a script runs, so each is kept short.
const PRUNE_CALL: usize = 100;

impl Store {
    /// Up to `first` articles of `list` in `order` after `after` (from the
    /// top without it).
    pub async fn feed(
        &self,
        list: List<'_>,
        order: Order,
        after: Option<&Position>,
        first: usize,
    ) -> AppResult<FeedPage> {
        let value;
        let member;
        let start = match after {
            Some(position) => {
                value = format!("{:?}", position.value);
                member = keys::article(position.id);
                Start::After {
                    value: &value,
                    member: &member,
                }
            }
            None => Start::Rank(0),
        };
        self.feed_from(list, order, start, first).await
    }

    /// One page by rank, for the offset pages of `articles` in an order
    /// whose ranking is pruned or cached (`TOP_*`, a user's `SCORE`).
    pub async fn ranked_page(
        &self,
        list: List<'_>,
        order: Order,
        start: usize,
        size: usize,
    ) -> AppResult<Vec<Ranked>> {
        let page = self
            .feed_from(list, order, Start::Rank(start), size)
            .await?;
        Ok(page
            .entries
            .into_iter()
            .take(size)
            .map(|(ranked, _)| ranked)
            .collect())
    }

    /// A page of `list` from `start`, from every shard's slice of it (see
    /// [`Store::merged_ranking`]); a cursor's position holds on every slice.
    async fn feed_from(
        &self,
        list: List<'_>,
        order: Order,
        start: Start<'_>,
        first: usize,
    ) -> AppResult<FeedPage> {
        let source = &list.source(order);
        let skip = match start {
            Start::Rank(rank) => rank,
            Start::After { .. } => 0,
        };
        let read = |shard, from: usize, count: usize| {
            let start = match start {
                Start::Rank(_) => Start::Rank(from),
                after => after,
            };
            let at = self.layout.at(shard);
            // The script answers one entry more than it is asked for.
            let call = scripts::feed(at, source, start, count - 1);
            SliceRead::script(call, |reply| {
                let reply = FeedReply::read(reply)?;
                Some((reply.members, reply.total))
            })
        };
        let (merged, total) = self.merged_ranking((skip, first + 1), read).await?;
        let mut entries: Vec<(Ranked, Position)> = merged
            .iter()
            .filter_map(|(member, value)| {
                let id = keys::article_id(member)?;
                // The queue's values are flags, not scores.
                let scored = order == Order::Score && !matches!(list, List::Queue);
                let score = scored.then_some(*value);
                Some(((id, score), Position { value: *value, id }))
            })
            .collect();
        let has_next = entries.len() > first;
        entries.truncate(first);
        Ok(FeedPage {
            entries,
            has_next,
            total,
        })
    }

    async fn tend_top(&self, every: Duration) -> AppResult<()> {
        let now = unix_secs();
        let mut conn = self.conn().await?;
        let state = self.derive.notifications();
        let single = !self.layout.is_cluster();
        if single
            && matches!(state, Notifications::Refused | Notifications::Down)
            && self.take_sweep_lease(&mut conn, every).await?
        {
            self.sweep_round(&mut conn, SWEEP_BATCH / SWEEP_CALL)
                .await?;
        }
        // Pruning last, the year last of all: its mark says a round is done.
        for period in Period::ALL {
            let Some(secs) = period.secs() else { continue };
            let cutoff = now.saturating_sub(secs);
            for at in self.layout.shards().map(|s| self.layout.at(s)) {
                // Short scripts until the period is caught up.
                while scripts::prune_top(&mut conn, at, period, cutoff, PRUNE_CALL).await?
                    == PRUNE_CALL as u64
                {}
            }
        }
        Ok(())
    }

    /// Whether this instance runs this round's sweep (one per round).
    async fn take_sweep_lease(&self, conn: &mut Conn, every: Duration) -> AppResult<bool> {
        let lease_ms = (every.as_millis() as u64 * 9 / 10).max(1);
        let leased: Option<String> = redis::cmd("SET")
            .arg(keys::SWEEP_LEASE)
            .arg(unix_secs())
            .arg("NX")
            .arg("PX")
            .arg(lease_ms)
            .query_async(conn)
            .await?;
        Ok(leased.is_some())
    }

    /// Starts the net-vote rankings' background work (see the module doc);
    /// dropping the handle stops it. Failures (Redis down) are logged and
    /// tried again on the next tick.
    pub fn start_top_index(&self, every: Duration) -> TopIndex {
        let store = self.clone();
        let task = AbortOnDropHandle::new(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                // Last: its final pruning marks a round as done.
                if let Err(e) = store.tend_top(every).await {
                    tracing::warn!(error = %e, "tending the net-vote rankings failed");
                }
            }
        }));
        TopIndex { _task: task }
    }
}

/// The net-vote rankings' background work; dropping it stops the work
/// (between two scripts, each of which is atomic).
pub struct TopIndex {
    _task: AbortOnDropHandle<()>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_carry_their_feed_and_refuse_others() {
        let group = GroupName::parse("rust").unwrap();
        let position = Position {
            value: 1_732_400_000.123_456,
            id: ArticleId(42),
        };
        let site = List::Site;
        let cursor = Cursor::encode(Order::Score, &site, &position);
        assert_eq!(
            Cursor::decode(&cursor, Order::Score, &site).unwrap(),
            position
        );
        for (order, list) in [
            (Order::Time, List::Site),
            (Order::Top(Period::Week), List::Site),
            (Order::Score, List::Group(&group)),
            (Order::Score, List::User("alice")),
        ] {
            assert!(Cursor::decode(&cursor, order, &list).is_err());
        }
        for bad in ["", "zz", "00", &hex::encode("v1\nscore\nsite\nNaN\n1")] {
            assert!(Cursor::decode(bad, Order::Score, &site).is_err(), "{bad}");
        }
    }
}
