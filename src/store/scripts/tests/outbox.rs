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
