//! The derivation scripts: an article or group already right costs no
//! write; the sweep walks in bounded rounds from a shared place; large
//! voter sets and groups go in batches (a book write derived once, and
//! counts that follow the voted sets, are tested through the API:
//! `book_writes.rs`, `vote_counts.rs`).

use super::*;
use crate::domain::VoteDirection;
use crate::store::deriver::SWEEP_CALL;
use crate::store::keys;
use crate::store::scripts::derive::SCRIPT_MEMBERS;

/// The book's `article_vote`, command for command.
async fn book_vote(c: &mut Conn, voter: &str, id: u64) {
    let article = format!("article:{id}");
    let added: i64 = q(c, cmd("SADD").arg(format!("voted:{id}")).arg(voter)).await;
    assert_eq!(added, 1);
    let () = q(c, cmd("ZINCRBY").arg(keys::SCORE).arg(432).arg(&article)).await;
    let () = q(c, cmd("HINCRBY").arg(&article).arg("votes").arg(1)).await;
}

/// The rest of the book's `post_article` after its voted set: the hash,
/// then `score:` and `time:`, at `now`.
async fn book_post_rest(c: &mut Conn, id: u64, title: &str, poster: &str, now: f64) {
    let article = format!("article:{id}");
    let time = now.to_string();
    let fields = [
        ("title", title),
        ("poster", poster),
        ("time", &time),
        ("votes", "1"),
    ];
    hset(c, &article, &fields).await;
    let score = now + 432.0;
    let () = q(c, cmd("ZADD").arg(keys::SCORE).arg(score).arg(&article)).await;
    let () = q(c, cmd("ZADD").arg(keys::TIME).arg(now).arg(&article)).await;
}

/// One call of the derive-articles script.
async fn derive(c: &mut Conn, ids: &[ArticleId], relist: usize) -> Derived {
    let derived = derive_articles(c, ids, relist).await;
    derived.expect("the derive-articles script runs")
}

/// One call of the derive-group script on group `name`.
async fn follow(
    c: &mut Conn,
    name: &str,
    mode: GroupMode,
    cursor: &str,
    candidates: &[ArticleId],
) -> GroupDerived {
    let reply = derive_group(c, &group(name), mode, cursor, candidates).await;
    reply.expect("the derive-group script runs")
}

async fn dirty(c: &mut Conn) -> u64 {
    let info: String = q(c, cmd("INFO").arg("persistence")).await;
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn votegraphs_own_writes_leave_nothing_to_derive() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    posted(c, "alice", "one", &["rust"]).await;
    vote_as(c, ArticleId(1), "bob", VoteDirection::Down).await;
    let before = dirty(c).await;
    let derived = derive(c, &[ArticleId(1)], 0).await;
    assert_eq!(derived.changed, 0);
    assert!(derived.voters_left.is_empty());
    let reply = follow(c, "rust", GroupMode::Check, "0", &[ArticleId(1)]).await;
    assert_eq!(reply, GroupDerived::Synced { changed: vec![] });
    assert_eq!(dirty(c).await, before, "nothing written");
}

#[tokio::test]
async fn the_sweep_goes_in_bounded_rounds_from_a_shared_place() {
    let redis = TestRedis::start().await;
    let store = redis.store(None);
    let c = &mut redis.conn().await;
    let articles = SWEEP_CALL + 5;
    for n in 0..articles {
        posted(c, "alice", &format!("a{n}"), &[]).await;
    }
    for id in 1..=articles {
        book_vote(c, "user:bob", id).await;
    }
    let mut derived = Vec::new();
    for _ in 0..2 {
        store.sweep_round(c, 1).await.unwrap();
        derived.push(store.deriver_stats().derived);
    }
    assert_eq!(derived, [SWEEP_CALL, articles]);
    let at: Vec<String> = q(c, cmd("HMGET").arg(keys::SWEEP).arg("from").arg("skip")).await;
    assert_eq!(at, ["-inf", "0"], "back to the start");
    store.sweep_round(c, 1).await.unwrap();
    assert_eq!(store.deriver_stats().derived, articles, "nothing left");
    assert_eq!(store.deriver_stats().sweep_rounds, 3);
}

#[tokio::test]
async fn a_large_voter_set_is_indexed_in_batches() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    posted(c, "alice", "big", &[]).await;
    let voters = SCRIPT_MEMBERS + 500;
    for n in 0..voters {
        book_vote(c, &format!("user:v{n}"), 1).await;
    }
    let derived = derive(c, &[ArticleId(1)], 0).await;
    assert_eq!(
        derived.voters_left,
        [ArticleId(1)],
        "too many for one script"
    );
    let mut cursor = "0".to_owned();
    let mut calls = 0;
    for down in [true, false] {
        loop {
            let snapshot = format!("{},0", voters + 1);
            let last = (!down).then_some(snapshot.as_str());
            let batch = index_voters(c, ArticleId(1), down, &cursor, last)
                .await
                .unwrap();
            calls += 1;
            if batch.next == "0" {
                break;
            }
            cursor = batch.next;
        }
        cursor = "0".to_owned();
    }
    assert!(calls >= 3, "{calls} calls");
    for n in [0, voters - 1] {
        let index = zscore(c, &format!("user:v{n}:votes"), "article:1").await;
        assert!(index.is_some(), "v{n}");
    }
    let again = derive(c, &[ArticleId(1)], 0).await;
    assert!(again.voters_left.is_empty(), "the sizes were recorded");
}

#[tokio::test]
async fn a_large_group_is_followed_in_scan_batches() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let members = SCRIPT_MEMBERS + 10;
    let mut pipe = redis::pipe();
    for n in 1..=members {
        pipe.sadd("group:big", format!("article:{n}")).ignore();
    }
    let () = pipe.query_async(c).await.unwrap();
    let reply = follow(c, "big", GroupMode::Check, "0", &[]).await;
    assert_eq!(
        reply,
        GroupDerived::Scan { changed: vec![] },
        "too large to compare whole"
    );
    let mut cursor = "0".to_owned();
    let mut added = 0;
    loop {
        match follow(c, "big", GroupMode::Add, &cursor, &[]).await {
            GroupDerived::Cursor { next, changed } => {
                added += changed.len() as u64;
                if next == "0" {
                    break;
                }
                cursor = next;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(added, members);
    let listed: Vec<String> = q(c, cmd("SMEMBERS").arg("article:7:groups")).await;
    assert_eq!(listed, ["big"]);
    let size: f64 = q(c, cmd("ZSCORE").arg(keys::GROUPS_BY_SIZE).arg("big")).await;
    assert_eq!(size, -(members as f64));
    let reply = follow(c, "big", GroupMode::Check, "0", &[]).await;
    assert_eq!(reply, GroupDerived::Synced { changed: vec![] });
}

#[tokio::test]
async fn a_vote_on_an_article_not_derived_yet_is_counted_once() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    // The book's post_article, command for command.
    let now = redis_now(c).await;
    let () = q(c, cmd("INCR").arg("article:")).await;
    let () = q(c, cmd("SADD").arg("voted:1").arg("user:alice")).await;
    book_post_rest(c, 1, "t", "user:alice", now).await;
    // votegraph's vote lands before the deriver runs.
    vote_as(c, ArticleId(1), "bob", VoteDirection::Up).await;
    let derived = derive(c, &[ArticleId(1)], 0).await;
    assert_eq!(derived.changed, 1);
    let karma: f64 = q(c, cmd("ZSCORE").arg(keys::KARMA).arg("user:alice")).await;
    assert_eq!(karma.floor(), 2.0, "the post's upvote and bob's, once each");
}

/// The vote script moves the hash's `indexed` field by its own vote, so a
/// voter another writer added just before still shows as a difference,
/// and the quick check of a notified article does not miss it.
#[tokio::test]
async fn a_book_vote_followed_by_a_votegraph_vote_is_still_derived() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    posted(c, "alice", "one", &[]).await;
    book_vote(c, "user:bob", 1).await;
    vote_as(c, ArticleId(1), "carol", VoteDirection::Up).await;
    let indexed: String = q(c, cmd("HGET").arg("article:1").arg("indexed")).await;
    assert_eq!(indexed, "2,0", "alice's and carol's votes, not bob's");
    let derived = derive(c, &[ArticleId(1)], 0).await;
    assert_eq!(derived.changed, 1, "bob's vote reaches the rankings");
    let index = zscore(c, "user:bob:votes", "article:1").await;
    assert!(index.is_some(), "and bob's myVote");
    let indexed: String = q(c, cmd("HGET").arg("article:1").arg("indexed")).await;
    assert_eq!(indexed, "3,0");
    let again = derive(c, &[ArticleId(1)], 0).await;
    assert_eq!(again.changed, 0);
}

/// An article named before it is in `time:` and `score:` (the book's post
/// caught after its first write) is answered absent, apart from the ones
/// with voters left; once posted, it derives.
#[tokio::test]
async fn an_article_named_before_its_post_is_written_is_answered_absent() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    posted(c, "alice", "one", &[]).await;
    // The book's post_article, stopped after its first command.
    let () = q(c, cmd("SADD").arg("voted:2").arg("user:bob")).await;
    let derived = derive(c, &[ArticleId(1), ArticleId(2)], 0).await;
    assert_eq!(derived.absent, [ArticleId(2)]);
    assert!(derived.voters_left.is_empty());

    // The rest of it.
    let now = redis_now(c).await;
    book_post_rest(c, 2, "two", "user:bob", now).await;
    let derived = derive(c, &[ArticleId(2)], 0).await;
    assert!(derived.absent.is_empty());
    assert_eq!(derived.changed, 1);
}

/// A group derivation writes the article's group set only; the group list
/// in the hash is rebuilt by the article's derivation, once for every
/// group that named it, and a script stops once it went through its
/// members, leaving the rest to the next.
#[tokio::test]
async fn group_lists_are_rebuilt_once_within_a_script_budget() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    posted(c, "alice", "one", &["rust"]).await;
    posted(c, "alice", "two", &[]).await;
    let groups = SCRIPT_MEMBERS;
    let mut pipe = redis::pipe();
    for g in 0..groups {
        pipe.sadd(format!("group:g{g}"), "article:1").ignore();
    }
    let () = pipe.query_async(c).await.unwrap();
    for g in 0..groups {
        let reply = follow(c, &format!("g{g}"), GroupMode::Check, "0", &[ArticleId(1)]).await;
        assert_eq!(
            reply,
            GroupDerived::Synced {
                changed: vec![ArticleId(1)]
            }
        );
    }
    let listed: String = q(c, cmd("HGET").arg("article:1").arg("groups")).await;
    assert_eq!(listed, "rust", "not rebuilt by the group derivations");

    let derived = derive(c, &[ArticleId(1), ArticleId(2)], 1).await;
    assert_eq!(
        derived.rest,
        [ArticleId(1), ArticleId(2)],
        "relisting the first spent the script"
    );
    assert!(derived.rest_to_relist.is_empty());
    let listed: String = q(c, cmd("HGET").arg("article:1").arg("groups")).await;
    assert_eq!(listed.split(',').count() as u64, groups + 1);
    assert!(listed.starts_with("g0,g1,g10,"), "{listed}");
    let derived = derive(c, &[ArticleId(1), ArticleId(2)], 0).await;
    assert!(derived.rest.is_empty(), "both derived");
}
