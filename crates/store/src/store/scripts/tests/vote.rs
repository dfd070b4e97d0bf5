//! The vote script: the rankings it moves, the articles it finds, the
//! event it publishes and the lifetimes it gives.

use super::*;
use crate::domain::VoteDirection;
use crate::store::keys;

/// The article's `votes` and `downvotes`.
async fn counts(conn: &mut Conn, id: ArticleId) -> (i64, i64) {
    let fields = ["votes", "downvotes"];
    q(conn, cmd("HMGET").arg(keys::article(id)).arg(&fields)).await
}

/// The post time of article `id`, as `time:` holds it.
async fn post_time(conn: &mut Conn, id: ArticleId) -> f64 {
    zscore(conn, keys::TIME, &keys::article(id)).await.unwrap()
}

async fn karma(conn: &mut Conn, name: &str) -> f64 {
    zscore(conn, keys::KARMA, &keys::user(name))
        .await
        .unwrap()
        .floor()
}

/// A net-vote ranking's value for `net` votes of an article posted at `t`.
fn top_value(net: f64, t: f64) -> f64 {
    net * keys::TOP_STEP + t.floor()
}

/// Counts, score, karma, the voted sets and `myVote` through every
/// direction are tested through the API (`voting.rs`, `my_vote.rs`); here,
/// the net-vote rankings of every period and the replies.
#[tokio::test]
async fn a_vote_moves_the_net_vote_rankings_and_answers_same_when_repeated() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    let article = keys::article(id);
    let t = post_time(c, id).await;
    let steps = [
        (VoteDirection::Neither, VoteReply::Same, 1.0),
        (VoteDirection::Up, VoteReply::Changed, 2.0),
        (VoteDirection::Up, VoteReply::Same, 2.0),
        (VoteDirection::Down, VoteReply::Changed, 0.0),
        (VoteDirection::Neither, VoteReply::Changed, 1.0),
    ];
    for (dir, reply, net) in steps {
        assert_eq!(vote_as(c, id, "bob", dir).await, reply, "{dir:?}");
        for period in Period::ALL {
            let top = zscore(c, &keys::top(period), &article).await;
            assert_eq!(top, Some(top_value(net, t)), "{dir:?} {period:?}");
        }
    }
}

/// An article the book wrote without `time:` is found by its hash's
/// `time`; one without a time at all is missing.
#[tokio::test]
async fn a_vote_finds_the_article_by_its_hash_time() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let now = redis_now(c).await;
    hset(
        c,
        "article:7",
        &[("time", &now.to_string()), ("poster", "alice")],
    )
    .await;
    assert_eq!(
        vote_as(c, ArticleId(7), "bob", VoteDirection::Up).await,
        VoteReply::Changed
    );
    // A poster stored without the user prefix (the book's callers) gets
    // the karma all the same.
    assert_eq!(karma(c, "alice").await, 1.0);
    hset(c, "article:8", &[("title", "x")]).await;
    assert_eq!(
        vote_as(c, ArticleId(8), "bob", VoteDirection::Up).await,
        VoteReply::Missing
    );
}

#[tokio::test]
async fn votes_past_the_limit_are_refused_with_the_seconds_left() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    let once = limit(1, 60);
    let up = vote_within(c, id, "bob", VoteDirection::Up, once).await;
    assert_eq!(up, VoteReply::Changed);
    match vote_within(c, id, "bob", VoteDirection::Down, once).await {
        VoteReply::Limited(retry_after_secs) => assert!((1..=60).contains(&retry_after_secs)),
        other => panic!("{other:?}"),
    }
    assert_eq!(counts(c, id).await, (2, 0), "a refused vote writes nothing");
}

/// Cached rankings that hold the article (a group's, the poster's) move
/// with the vote; missing ones are not created. A group's score ranking
/// (which the book builds too) is always looked for; its `TOP_*` rankings
/// and the poster's rankings (`TOP_*` and score), only while their owner's
/// marker says one may be cached.
#[tokio::test]
async fn cached_rankings_follow_the_vote() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &["redis"]).await;
    let article = keys::article(id);
    let t = post_time(c, id).await;
    let redis_group = group("redis");
    let group_score = keys::group_ranking(&redis_group, Ranking::Score);
    let group_top = keys::group_top(&redis_group, Period::Week);
    let user_top = keys::user_top("alice", Period::Day);
    let user_score = keys::user_articles("alice", Ranking::Score);
    let tops = [&group_top, &user_top];
    for key in tops {
        let () = q(c, cmd("ZADD").arg(key).arg(top_value(1.0, t)).arg(&article)).await;
    }
    let () = q(c, cmd("ZADD").arg(&user_score).arg(1).arg(&article)).await;

    // Without their markers (nothing built them), the TOP_* rankings and
    // the poster's score ranking are not looked for.
    vote_as(c, id, "bob", VoteDirection::Up).await;
    for key in tops {
        assert_eq!(zscore(c, key, &article).await, Some(top_value(1.0, t)));
    }
    assert_eq!(zscore(c, &user_score, &article).await, Some(1.0));

    // The group's score ranking, as the book builds it: it moves (and,
    // one cached ranking found, every one that exists is moved).
    let () = q(c, cmd("ZADD").arg(&group_score).arg(1).arg(&article)).await;
    vote_as(c, id, "carol", VoteDirection::Up).await;
    let score = zscore(c, keys::SCORE, &article).await;
    assert_eq!(zscore(c, &group_score, &article).await, score);
    assert_eq!(zscore(c, &user_score, &article).await, score);
    let () = q(c, cmd("ZADD").arg(&user_score).arg(1).arg(&article)).await;

    // With the markers the feed script sets when it builds them, the TOP_*
    // rankings take the site's new value too (a stale one is set right),
    // and the poster's score ranking takes the new score.
    let () = q(c, cmd("DEL").arg(&group_score)).await;
    for key in tops {
        let () = q(c, cmd("ZADD").arg(key).arg(top_value(1.0, t)).arg(&article)).await;
    }
    for marker in [keys::group_cached(&redis_group), keys::user_cached("alice")] {
        let () = q(c, cmd("SET").arg(marker).arg(1).arg("EX").arg(60)).await;
    }
    vote_as(c, id, "dave", VoteDirection::Up).await;
    for key in tops {
        // The site's value: the post's own upvote and three more.
        assert_eq!(zscore(c, key, &article).await, Some(top_value(4.0, t)));
    }
    let site = zscore(c, &keys::top(Period::Week), &article).await;
    assert_eq!(site, Some(top_value(4.0, t)));
    let score = zscore(c, keys::SCORE, &article).await;
    assert_eq!(zscore(c, &user_score, &article).await, score);
    let missing = keys::group_top(&redis_group, Period::Day);
    let exists: bool = q(c, cmd("EXISTS").arg(missing)).await;
    assert!(!exists);
}

/// The score event the vote publishes is JSON the server reads, with the
/// article's groups whatever their names (one only the book's code could
/// write, with a quote, a backslash and a tab, is escaped).
#[tokio::test]
async fn the_score_event_is_read_back_whatever_the_group_names() {
    use futures_util::StreamExt;

    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(keys::SCORE_CHANNEL).await.unwrap();
    let mut events = pubsub.into_on_message();

    let (plain, _) = posted(c, "alice", "plain", &["news", "rust-lang"]).await;
    let (odd, _) = posted(c, "alice", "odd", &["news"]).await;
    let odd_name = "we\"ird\\\tname";
    let groups = format!("news,{odd_name}");
    hset(c, &keys::article(odd), &[("groups", &groups)]).await;

    for (id, groups) in [
        (plain, vec!["news", "rust-lang"]),
        (odd, vec!["news", odd_name]),
    ] {
        let before = redis_now(c).await;
        assert_eq!(
            vote_as(c, id, "bob", VoteDirection::Up).await,
            VoteReply::Changed
        );
        let message = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("a score event")
            .expect("the subscription is open");
        let payload: String = message.get_payload().unwrap();
        let event: crate::pubsub::ScoreEvent =
            serde_json::from_str(&payload).unwrap_or_else(|e| panic!("{payload}: {e}"));
        assert_eq!(event.id, id.0.to_string());
        assert_eq!((event.votes, event.downvotes), (2, 0));
        let score = zscore(c, keys::SCORE, &keys::article(id)).await.unwrap();
        assert_eq!(event.score, score);
        assert!(event.at >= before && event.at < before + 5.0, "{payload}");
        let mut got = event.groups.clone();
        got.sort();
        let mut want = groups.clone();
        want.sort();
        assert_eq!(got, want, "{payload}");
    }
}

/// An upvote after the last upvoter left makes the upvoters' set anew:
/// it gets the window's expiry again, as the first downvote gives the
/// downvoters' set theirs.
#[tokio::test]
async fn a_voted_set_made_anew_expires_with_the_window() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    vote_as(c, id, "alice", VoteDirection::Neither).await;
    let exists: bool = q(c, cmd("EXISTS").arg(keys::voted(id))).await;
    assert!(!exists, "the poster's was the only upvote");
    assert_eq!(
        vote_as(c, id, "bob", VoteDirection::Up).await,
        VoteReply::Changed
    );
    let ttl: i64 = q(c, cmd("TTL").arg(keys::voted(id))).await;
    assert!(
        ttl > keys::VOTING_WINDOW_SECS as i64 - 10 && ttl <= keys::VOTING_WINDOW_SECS as i64 + 1,
        "{ttl}"
    );
    // Later votes leave it as it is.
    vote_as(c, id, "carol", VoteDirection::Up).await;
    let again: i64 = q(c, cmd("TTL").arg(keys::voted(id))).await;
    assert!(again <= ttl && again > ttl - 5, "{again}");
}

/// A vote drops its voter's closed entries and keeps the index a week
/// more, outlasting every article in it; a longer lifetime (from another
/// writer) is not shortened.
#[tokio::test]
async fn a_vote_index_lives_past_every_article_in_it() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (first, _) = posted(c, "alice", "first", &[]).await;
    let (second, _) = posted(c, "alice", "second", &[]).await;
    let index = keys::user_votes("bob");
    let week = keys::VOTING_WINDOW_SECS as i64;

    let () = q(c, cmd("ZADD").arg(&index).arg(1000).arg("article:999")).await;
    let () = q(c, cmd("ZADD").arg(&index).arg(-1000).arg("article:998")).await;
    vote_as(c, first, "bob", VoteDirection::Up).await;
    let entries: Vec<String> = q(c, cmd("ZRANGE").arg(&index).arg(0).arg(-1)).await;
    assert_eq!(entries, [keys::article(first)], "the closed entries go");
    let ttl: i64 = q(c, cmd("TTL").arg(&index)).await;
    assert!((week - 5..=week).contains(&ttl), "{ttl}");

    let longer = 2 * week;
    let () = q(c, cmd("EXPIRE").arg(&index).arg(longer)).await;
    vote_as(c, second, "bob", VoteDirection::Down).await;
    let ttl: i64 = q(c, cmd("TTL").arg(&index)).await;
    assert!((longer - 5..=longer).contains(&ttl), "{ttl}");

    let () = q(c, cmd("EXPIRE").arg(&index).arg(10)).await;
    vote_as(c, second, "bob", VoteDirection::Down).await;
    let ttl: i64 = q(c, cmd("TTL").arg(&index)).await;
    assert!(
        (week - 5..=week).contains(&ttl),
        "an unchanged vote keeps it too: {ttl}"
    );
}
