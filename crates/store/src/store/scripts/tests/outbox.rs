//! The outbox's entries (the cluster layout's karma, vote indexes and
//! group sizes, see `outbox.rs`) change their target once, however often a drain hands
//! them over: a drain killed before it deleted them, or two at once.

use super::*;
use crate::store::keys::{self, At, Shard};
use crate::store::outbox::Entry;

fn entry(id: &str, kind: &'static str, whose: &str, delta: &str) -> Entry {
    Entry {
        id: id.to_owned(),
        kind,
        whose: whose.to_owned(),
        article: String::new(),
        delta: delta.to_owned(),
        at: "1700000000.000000".to_owned(),
    }
}

/// A vote of ann's on article 9 (`value`: its index value, 0 for none).
fn vote(id: &str, value: &str) -> Entry {
    Entry {
        article: "{s3.57}article:9".to_owned(),
        ..entry(id, "vote", "user:ann", value)
    }
}

async fn my_vote(c: &mut Conn) -> Option<f64> {
    let index = keys::user_votes("ann");
    q(c, cmd("ZSCORE").arg(index).arg("{s3.57}article:9")).await
}

async fn karma(c: &mut Conn, member: &str) -> i64 {
    let score: Option<f64> = q(c, cmd("ZSCORE").arg(keys::KARMA).arg(member)).await;
    score.map_or(0, |s| s.floor() as i64)
}

async fn size(c: &mut Conn, group: &str) -> Option<f64> {
    q(c, cmd("ZSCORE").arg(keys::GROUPS_BY_SIZE).arg(group)).await
}

#[tokio::test]
async fn outbox_entries_apply_once_however_often_they_are_handed_over() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (from, other) = (Shard(3), Shard(5));
    let first = [
        entry("1700000000000-0", "karma", "user:ann", "1"),
        entry("1700000000000-1", "group", "rust", "1"),
        entry("1700000000001-0", "karma", "user:ann", "-1"),
        entry("1700000000001-1", "karma", "user:ann", "1"),
    ];
    let refs: Vec<&Entry> = first.iter().collect();
    assert_eq!(apply_outbox(c, At::SINGLE, from, &refs).await.unwrap(), 4);
    // Handed over again, with one new entry: only the new one applies.
    let again = entry("1700000000002-0", "karma", "user:ann", "1");
    let mut refs = refs.clone();
    refs.push(&again);
    assert_eq!(apply_outbox(c, At::SINGLE, from, &refs).await.unwrap(), 1);
    assert_eq!(apply_outbox(c, At::SINGLE, from, &refs).await.unwrap(), 0);
    assert_eq!(karma(c, "user:ann").await, 2);
    assert_eq!(size(c, "rust").await, Some(-1.0));
    // Another source's entries have their own order.
    let theirs = [entry("5-0", "group", "rust", "-1")];
    let refs: Vec<&Entry> = theirs.iter().collect();
    assert_eq!(apply_outbox(c, At::SINGLE, other, &refs).await.unwrap(), 1);
    assert_eq!(size(c, "rust").await, None, "an empty group leaves");
}

#[tokio::test]
async fn queued_votes_reach_the_voters_index_in_order_and_once() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let from = Shard(3);
    let cast = [
        vote("1700000000000-0", "1699990000"),
        vote("1700000000000-1", "0"),
        vote("1700000000000-2", "-1699990000"),
    ];
    let refs: Vec<&Entry> = cast.iter().collect();
    assert_eq!(apply_outbox(c, At::SINGLE, from, &refs).await.unwrap(), 3);
    assert_eq!(my_vote(c).await, Some(-1699990000.0));
    // Handed over again, an earlier vote does not come back.
    let taken_back = vote("1700000000001-0", "0");
    let mut refs = refs[..2].to_vec();
    assert_eq!(apply_outbox(c, At::SINGLE, from, &refs).await.unwrap(), 0);
    assert_eq!(my_vote(c).await, Some(-1699990000.0));
    refs.push(&taken_back);
    assert_eq!(apply_outbox(c, At::SINGLE, from, &refs).await.unwrap(), 1);
    assert_eq!(my_vote(c).await, None);
}

/// Ann's vote on article 9 queued as outbox entry `id`, applied at once by
/// its write (as `Store::index_now` does).
async fn ahead(c: &mut Conn, id: &str, value: &str) -> u64 {
    let queued = QueuedVote {
        entry: id.to_owned(),
        value: value.to_owned(),
        at: "1700000000.000000".to_owned(),
    };
    let (from, ann) = ((At::SINGLE, Shard(3)), user("ann"));
    apply_queued_vote(c, from, &ann, "{s3.57}article:9", &queued)
        .await
        .unwrap()
}

async fn drain(c: &mut Conn, entries: &[&Entry]) -> u64 {
    apply_outbox(c, At::SINGLE, Shard(3), entries)
        .await
        .unwrap()
}

/// A vote applied by its write and again by the drain, in either order
/// and with the voter's next vote in between, leaves the newest vote.
#[tokio::test]
async fn a_vote_applied_ahead_and_drained_leaves_the_newest_vote() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (up, none) = (
        vote("1700000000000-0", "1699990000"),
        vote("1700000000000-1", "0"),
    );
    // Applied ahead, then drained: once.
    assert_eq!(ahead(c, &up.id, &up.delta).await, 1);
    assert_eq!(my_vote(c).await, Some(1699990000.0));
    assert_eq!(ahead(c, &up.id, &up.delta).await, 0, "the same entry");
    // The next vote is applied ahead before the drain reaches the first:
    // the first, drained then, does not bring the old vote back.
    assert_eq!(ahead(c, &none.id, &none.delta).await, 1);
    assert_eq!(drain(c, &[&up]).await, 1);
    assert_eq!(my_vote(c).await, None);
    assert_eq!(ahead(c, &up.id, &up.delta).await, 0, "drained already");
    assert_eq!(drain(c, &[&up, &none]).await, 1);
    assert_eq!(my_vote(c).await, None);
    let forgotten = keys::user_votes_ahead("ann");
    assert!(!exists(c, &forgotten).await, "the drain reached both");

    // Drained first, then applied ahead late: the newer vote stays.
    let (down, up_again) = (
        vote("1700000000001-0", "-1699990000"),
        vote("1700000000001-1", "1699990000"),
    );
    assert_eq!(drain(c, &[&down, &up_again]).await, 2);
    assert_eq!(ahead(c, &down.id, &down.delta).await, 0);
    assert_eq!(my_vote(c).await, Some(1699990000.0));
    assert!(!exists(c, &forgotten).await);
}

/// A script's reply with a vote queued after it, and one without.
#[test]
fn queued_votes_are_read_after_the_reply() {
    let voted = Queuing::<VoteReply>::read(&reply(&["changed", "queued", "5-1", "-17", "1.5"]));
    let queued = QueuedVote {
        entry: "5-1".to_owned(),
        value: "-17".to_owned(),
        at: "1.5".to_owned(),
    };
    assert_eq!(voted, Some(Queuing(VoteReply::Changed, Some(queued))));
    let same = Queuing::<VoteReply>::read(&reply(&["same"]));
    assert_eq!(same, Some(Queuing(VoteReply::Same, None)));
    assert_eq!(
        Queuing::<VoteReply>::read(&reply(&["changed", "queued"])),
        None
    );
    // A slug that reads "queued" is a slug.
    let posted = Queuing::<PostReply>::read(&reply(&["posted", "3", "queued"]));
    let slug = "queued".to_owned();
    let expected = PostReply::Posted {
        id: ArticleId(3),
        slug,
    };
    assert_eq!(posted, Some(Queuing(expected, None)));
}
