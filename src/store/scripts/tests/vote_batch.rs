//! Batches of votes: a batch writes what its votes cast one by one write,
//! a batch Redis refuses fails whole, and each vote publishes its own event;
//! the store sends the votes that wait while a batch runs as the next
//! batches, at most `MAX_BATCH` each, leaves out a vote whose caller has
//! gone, and holds at most `QUEUED` waiting.

use super::*;
use crate::domain::VoteDirection::{self, Down, Neither, Up};
use crate::store::keys;
use crate::store::vote_batch::{MAX_BATCH, QUEUED};

async fn zscore(conn: &mut Conn, key: &str, member: &str) -> Option<f64> {
    q(conn, cmd("ZSCORE").arg(key).arg(member)).await
}

fn ballot(id: ArticleId, voter: &str, direction: VoteDirection) -> Ballot {
    Ballot {
        id,
        voter: user(voter),
        direction,
    }
}

/// What votes left of an article, in terms that do not depend on when it
/// was posted: counts, voters, net votes by `score:` and by each net-vote
/// ranking.
async fn outcome(c: &mut Conn, id: ArticleId, prefix: &str) -> String {
    let article = keys::article(id);
    let counts: (i64, i64) = q(c, cmd("HMGET").arg(&article).arg("votes").arg("downvotes")).await;
    let mut sets = Vec::new();
    for key in [keys::voted(id), keys::downvoted(id)] {
        let mut members: Vec<String> = q(c, cmd("SMEMBERS").arg(key)).await;
        members.sort();
        // The two sides' voters differ only in their first letter, and
        // their posters (who upvote their own posts) in their name.
        let names: Vec<String> = members
            .iter()
            .map(|m| match m.strip_prefix("user:poster-") {
                Some(_) => "poster".to_owned(),
                None => m.replacen(&format!("user:{prefix}"), "", 1),
            })
            .collect();
        sets.push(names);
    }
    let t = zscore(c, keys::TIME, &article).await.unwrap();
    let score = zscore(c, keys::SCORE, &article).await.unwrap();
    let net = ((score - t) / keys::VOTE_SCORE).round();
    let mut tops = Vec::new();
    for period in Period::ALL {
        let value = zscore(c, &keys::top(period), &article).await.unwrap();
        tops.push((value - t.floor()) / keys::TOP_STEP);
    }
    format!("{counts:?} {sets:?} net {net} tops {tops:?}")
}

/// Each voter's index, by the article's place in its side's list.
async fn indexed(c: &mut Conn, voter: &str, side: &[ArticleId]) -> Vec<(usize, f64)> {
    let entries = zset(c, &keys::user_votes(voter)).await;
    let mut out: Vec<(usize, f64)> = entries
        .iter()
        .map(|(member, score)| {
            let at = side
                .iter()
                .position(|id| keys::article(*id) == *member)
                .expect("an article of this side");
            (at, score.signum())
        })
        .collect();
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

/// One batch of votes (up, down, switches, a cleared vote, an unchanged
/// one, a missing article, a closed one, a voter past the limit, several
/// votes on one article) writes what the same votes cast one at a time
/// write, and answers the same.
#[tokio::test]
async fn a_batch_writes_what_its_votes_cast_one_by_one_write() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let mut sides = Vec::new();
    for poster in ["poster-a", "poster-b"] {
        let mut ids = Vec::new();
        for (i, groups) in [&["news"][..], &[], &["news", "rust"]].iter().enumerate() {
            ids.push(posted(c, poster, &format!("{poster}-{i}"), groups).await.0);
        }
        sides.push(ids);
    }
    // An article whose voting closed: its post time eight days back.
    let (closed, _) = posted(c, "poster-c", "closed", &[]).await;
    let eight_days_ago = redis_now(c).await - 8.0 * 86_400.0;
    let () = q(
        c,
        cmd("ZADD")
            .arg(keys::TIME)
            .arg(eight_days_ago)
            .arg(keys::article(closed)),
    )
    .await;
    let missing = ArticleId(999);
    let steps: [(Option<usize>, &str, VoteDirection); 18] = [
        (Some(0), "gina", Up),
        (Some(0), "hank", Up),
        (Some(0), "bob", Up),
        (Some(0), "carol", Down),
        (Some(0), "bob", Down),
        (Some(1), "dave", Up),
        (Some(1), "dave", Up),
        (Some(2), "erin", Neither),
        (Some(2), "erin", Up),
        (Some(2), "erin", Neither),
        (Some(1), "bob", Down),
        (None, "bob", Up),
        (Some(0), "carol", Neither),
        (Some(0), "frank", Up),
        (Some(1), "frank", Up),
        (Some(2), "frank", Down),
        (Some(0), "frank", Neither),
        (Some(1), "frank", Down),
    ];
    let within = limit(4, 60);
    let article = |side: &[ArticleId], at: Option<usize>| match at {
        Some(i) => side[i],
        None => missing,
    };

    let batch: Vec<Ballot> = steps
        .iter()
        .map(|(at, voter, dir)| ballot(article(&sides[0], *at), &format!("a{voter}"), *dir))
        .chain([ballot(closed, "acarol", Up)])
        .collect();
    let batched = votes(c, &batch, within).await.unwrap().0;
    let mut alone = Vec::new();
    for b in steps
        .iter()
        .map(|(at, voter, dir)| ballot(article(&sides[1], *at), &format!("b{voter}"), *dir))
        .chain([ballot(closed, "bcarol", Up)])
    {
        alone.push(vote(c, b.id, &b.voter, b.direction, within).await.unwrap());
    }
    assert_eq!(batched, alone);
    // The steps meant what they say: each outcome is there.
    for want in [
        VoteReply::Changed,
        VoteReply::Same,
        VoteReply::Missing,
        VoteReply::Closed,
    ] {
        assert!(alone.contains(&want), "{want:?} in {alone:?}");
    }
    // (the last step is frank's fifth vote)
    assert!(
        matches!(alone[steps.len() - 1], VoteReply::Limited { .. }),
        "{alone:?}"
    );

    for (i, (a, b)) in sides[0].iter().zip(&sides[1]).enumerate() {
        let a = outcome(c, *a, "a").await;
        let b = outcome(c, *b, "b").await;
        assert_eq!(a, b, "article {i} of each side");
    }
    let karma_a = zscore(c, keys::KARMA, &keys::user("poster-a")).await;
    let karma_b = zscore(c, keys::KARMA, &keys::user("poster-b")).await;
    assert!(karma_a.is_some(), "the posters have karma");
    assert_eq!(karma_a.map(f64::floor), karma_b.map(f64::floor));
    for voter in ["bob", "carol", "dave", "erin", "frank", "gina", "hank"] {
        let a = indexed(c, &format!("a{voter}"), &sides[0]).await;
        let b = indexed(c, &format!("b{voter}"), &sides[1]).await;
        assert_eq!(a, b, "{voter}'s index");
    }
}

/// A batch a Redis call refuses (a voted set is a string, written by hand)
/// is an error for every vote in it, and counts none of the votes after
/// the refusal.
#[tokio::test]
async fn a_batch_redis_refuses_is_each_of_its_votes_error() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (broken, _) = posted(c, "alice", "broken", &[]).await;
    let (after, _) = posted(c, "alice", "after", &[]).await;
    let () = q(c, cmd("DEL").arg(keys::voted(broken))).await;
    let () = q(c, cmd("SET").arg(keys::voted(broken)).arg("not a set")).await;

    let refused = votes(
        c,
        &[ballot(broken, "bob", Up), ballot(after, "bob", Up)],
        unlimited(),
    )
    .await;
    assert!(matches!(refused, Err(AppError::Storage(_))), "{refused:?}");
    let votes: i64 = q(c, cmd("HGET").arg(keys::article(after)).arg("votes")).await;
    assert_eq!(votes, 1, "the poster's own vote only");
}

/// Each changed vote of a batch publishes its own event, in order, after
/// its own notifications, with the counts it left (so subscribers and the
/// deriver see a batch as they see votes cast one by one).
#[tokio::test]
async fn each_vote_of_a_batch_publishes_its_event() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "watched", &["news"]).await;
    let mut followed = Followed::start(&redis).await;
    let replies = votes(
        c,
        &[
            ballot(id, "bob", Up),
            ballot(id, "carol", Down),
            ballot(id, "bob", Up),
            ballot(id, "bob", Down),
        ],
        unlimited(),
    )
    .await
    .unwrap()
    .0;
    assert_eq!(replies[2], VoteReply::Same, "no event for it");
    // (votes, downvotes, notifications: the set joined and the set left,
    // plus the expiry of a set a vote made)
    for (votes, downvotes, notified) in [(2, 0, 1), (2, 1, 2), (1, 2, 2)] {
        let (keys_notified, event) = followed.until_event().await;
        assert_eq!(event["id"], id.to_string());
        assert_eq!(
            (event["votes"].as_i64(), event["downvotes"].as_i64()),
            (Some(votes), Some(downvotes))
        );
        assert_eq!(event["groups"], serde_json::json!(["news"]));
        assert_eq!(event["notified"], notified, "{event}");
        assert_eq!(keys_notified.len(), notified, "{keys_notified:?}");
    }
}

/// Holds Redis' writes for `ms` (the batch in it waits, and votes queue).
async fn pause_writes(c: &mut Conn, ms: u64) {
    let () = q(c, cmd("CLIENT").arg("PAUSE").arg(ms).arg("WRITE")).await;
}

/// Spawns `voters` upvotes of article `id`, by voter0, voter1, …, each
/// its own task (as concurrent requests are).
fn upvotes(
    store: &Store,
    id: ArticleId,
    voters: usize,
) -> Vec<tokio::task::JoinHandle<Result<bool, crate::error::AppError>>> {
    (0..voters)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .vote(id, &user(&format!("voter{i}")), Up, unlimited())
                    .await
            })
        })
        .collect()
}

/// Votes sent while a batch waits in Redis go as the next batches, at
/// most `MAX_BATCH` each, and every one is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn votes_that_wait_while_a_batch_runs_go_together() {
    let redis = TestRedis::start().await;
    let store = redis.store();
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "popular", &[]).await;
    pause_writes(c, 300).await;
    let voters = 2 * MAX_BATCH + 6;
    let tasks = upvotes(&store, id, voters);
    for task in tasks {
        assert!(task.await.unwrap().unwrap(), "each vote changed something");
    }
    let stats = store.vote_batch_stats();
    assert_eq!(stats.votes, voters as u64);
    // The first batch may have left before the others came; the rest
    // waited, so went in full batches.
    let fewest = voters.div_ceil(MAX_BATCH) as u64;
    assert!((fewest..=fewest + 1).contains(&stats.batches), "{stats:?}");
    let votes: i64 = q(c, cmd("HGET").arg(keys::article(id)).arg("votes")).await;
    assert_eq!(votes, 1 + voters as i64);
}

/// A vote whose caller has gone (its request's deadline passed) while it
/// waited for a batch is not cast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_whose_caller_has_gone_is_not_cast() {
    let redis = TestRedis::start().await;
    let store = redis.store();
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "watched", &[]).await;
    pause_writes(c, 300).await;
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.vote(id, &user("bob"), Up, unlimited()).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let gone = {
        let store = store.clone();
        tokio::spawn(async move { store.vote(id, &user("carol"), Up, unlimited()).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    gone.abort();
    assert!(first.await.unwrap().unwrap());
    // The batch after the first one: nothing left to send.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let voters: Vec<String> = q(c, cmd("SMEMBERS").arg(keys::voted(id))).await;
    assert!(voters.contains(&"user:bob".to_owned()), "{voters:?}");
    assert!(!voters.contains(&"user:carol".to_owned()), "{voters:?}");
    assert_eq!(store.vote_batch_stats().votes, 1);
}

/// At most `QUEUED` votes wait for a batch; more wait for room (within
/// their request's deadline), and all are cast once Redis answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_holds_at_most_its_bound() {
    let redis = TestRedis::start().await;
    let store = redis.store();
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "crowded", &[]).await;
    pause_writes(c, 1000).await;
    let voters = QUEUED + 2 * MAX_BATCH;
    let tasks = upvotes(&store, id, voters);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(store.vote_batch_stats().queued, QUEUED);
    for task in tasks {
        assert!(task.await.unwrap().unwrap());
    }
    assert_eq!(store.vote_batch_stats().queued, 0);
    let votes: i64 = q(c, cmd("HGET").arg(keys::article(id)).arg("votes")).await;
    assert_eq!(votes, 1 + voters as i64);
}
