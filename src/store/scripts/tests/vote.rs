//! The vote script: up, down, a switch, a cleared vote, the closed voting
//! window, a missing article, the limit, and the cached rankings it moves.

use super::*;
use crate::domain::VoteDirection;
use crate::store::keys;

/// The article's `votes` and `downvotes`.
async fn counts(conn: &mut Conn, id: ArticleId) -> (i64, i64) {
    q(
        conn,
        cmd("HMGET")
            .arg(keys::article(id))
            .arg("votes")
            .arg("downvotes"),
    )
    .await
}

async fn zscore(conn: &mut Conn, key: &str, member: &str) -> Option<f64> {
    q(conn, cmd("ZSCORE").arg(key).arg(member)).await
}

async fn is_member(conn: &mut Conn, key: &str, member: &str) -> bool {
    q(conn, cmd("SISMEMBER").arg(key).arg(member)).await
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3
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

#[tokio::test]
async fn an_upvote_is_counted_once() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    let article = keys::article(id);
    let t = post_time(c, id).await;

    assert_eq!(
        vote_as(c, id, "bob", VoteDirection::Up).await,
        VoteReply::Changed
    );
    assert_eq!(counts(c, id).await, (2, 0));
    let score = zscore(c, keys::SCORE, &article).await.unwrap();
    assert!(close(score, t + 2.0 * keys::VOTE_SCORE), "{score} {t}");
    assert!(is_member(c, &keys::voted(id), "user:bob").await);
    assert_eq!(karma(c, "alice").await, 2.0);
    let indexed = zscore(c, &keys::user_votes("bob"), &article).await.unwrap();
    assert_eq!(
        indexed,
        t.ceil(),
        "an upvote is indexed as the post time, rounded up"
    );
    for period in Period::ALL {
        let top = zscore(c, &keys::top(period), &article).await;
        assert_eq!(top, Some(top_value(2.0, t)), "{period:?}");
    }

    // The same vote again changes nothing.
    assert_eq!(
        vote_as(c, id, "bob", VoteDirection::Up).await,
        VoteReply::Same
    );
    assert_eq!(counts(c, id).await, (2, 0));
    assert_eq!(zscore(c, keys::SCORE, &article).await, Some(score));
    assert_eq!(karma(c, "alice").await, 2.0);
}

#[tokio::test]
async fn a_switch_moves_the_voter_and_two_votes_of_score() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    let article = keys::article(id);
    let t = post_time(c, id).await;
    vote_as(c, id, "bob", VoteDirection::Up).await;

    assert_eq!(
        vote_as(c, id, "bob", VoteDirection::Down).await,
        VoteReply::Changed
    );
    assert_eq!(counts(c, id).await, (1, 1));
    let score = zscore(c, keys::SCORE, &article).await.unwrap();
    assert!(close(score, t), "{score} {t}");
    assert!(!is_member(c, &keys::voted(id), "user:bob").await);
    assert!(is_member(c, &keys::downvoted(id), "user:bob").await);
    // The downvoters' set expires when the voting window closes.
    let ttl: i64 = q(c, cmd("TTL").arg(keys::downvoted(id))).await;
    assert!(
        ttl > 0 && ttl <= keys::VOTING_WINDOW_SECS as i64 + 1,
        "{ttl}"
    );
    let indexed = zscore(c, &keys::user_votes("bob"), &article).await.unwrap();
    assert_eq!(
        indexed,
        -t.ceil(),
        "a downvote is indexed as minus the post time, rounded up"
    );
    assert_eq!(karma(c, "alice").await, 0.0);
    let top = zscore(c, &keys::top(Period::All), &article).await;
    assert_eq!(top, Some(top_value(0.0, t)));
}

#[tokio::test]
async fn a_cleared_vote_is_taken_back() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    let article = keys::article(id);
    let t = post_time(c, id).await;
    // Clearing a vote never cast changes nothing.
    assert_eq!(
        vote_as(c, id, "bob", VoteDirection::Neither).await,
        VoteReply::Same
    );
    vote_as(c, id, "bob", VoteDirection::Up).await;

    assert_eq!(
        vote_as(c, id, "bob", VoteDirection::Neither).await,
        VoteReply::Changed
    );
    assert_eq!(counts(c, id).await, (1, 0));
    let score = zscore(c, keys::SCORE, &article).await.unwrap();
    assert!(close(score, t + keys::VOTE_SCORE));
    assert!(!is_member(c, &keys::voted(id), "user:bob").await);
    assert!(!is_member(c, &keys::downvoted(id), "user:bob").await);
    assert_eq!(zscore(c, &keys::user_votes("bob"), &article).await, None);
    assert_eq!(karma(c, "alice").await, 1.0);
}

#[tokio::test]
async fn a_closed_voting_window_refuses_the_vote() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    let week_ago = redis_now(c).await - keys::VOTING_WINDOW_SECS as f64 - 5.0;
    let () = q(
        c,
        cmd("ZADD")
            .arg(keys::TIME)
            .arg(week_ago)
            .arg(keys::article(id)),
    )
    .await;

    assert_eq!(
        vote_as(c, id, "bob", VoteDirection::Up).await,
        VoteReply::Closed
    );
    assert_eq!(counts(c, id).await, (1, 0));
    assert!(!is_member(c, &keys::voted(id), "user:bob").await);
}

#[tokio::test]
async fn a_missing_article_is_answered_missing() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    assert_eq!(
        vote_as(c, ArticleId(42), "bob", VoteDirection::Up).await,
        VoteReply::Missing
    );
    assert!(!is_member(c, &keys::voted(ArticleId(42)), "user:bob").await);

    // An article the book wrote without `time:` is found by its hash's
    // `time`; one without a time at all is missing.
    let now = redis_now(c).await;
    let () = q(
        c,
        cmd("HSET")
            .arg("article:7")
            .arg("time")
            .arg(now)
            .arg("poster")
            .arg("alice"),
    )
    .await;
    assert_eq!(
        vote_as(c, ArticleId(7), "bob", VoteDirection::Up).await,
        VoteReply::Changed
    );
    // A poster stored without the user prefix (the book's callers) gets
    // the karma all the same.
    assert_eq!(karma(c, "alice").await, 1.0);
    let () = q(c, cmd("HSET").arg("article:8").arg("title").arg("x")).await;
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
    let bob = user("bob");
    assert_eq!(
        vote(c, id, &bob, VoteDirection::Up, once).await.unwrap(),
        VoteReply::Changed
    );
    match vote(c, id, &bob, VoteDirection::Down, once).await.unwrap() {
        VoteReply::Limited { retry_after_secs } => assert!((1..=60).contains(&retry_after_secs)),
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

/// The constants the vote script binds in its prelude are the ones
/// `keys.rs` defines, read back by Lua as the same texts and numbers.
#[tokio::test]
async fn the_vote_scripts_constants_read_back_in_lua() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let mut text = super::super::vote::constants().0;
    text.push_str(
        "return {by_time, by_score, karma, top[1], top[5], periods[1], periods[5], \
         user_prefix, user_score_suffix, user_top_infix, group_prefix, group_top_infix, \
         group_score_prefix, score_channel, string.format('%d', week), \
         score_moves[1], score_moves[4], top_moves[2], top_moves[5]}",
    );
    let read: Vec<String> = q(c, cmd("EVAL").arg(text).arg(0)).await;
    let want = [
        keys::TIME.to_owned(),
        keys::SCORE.to_owned(),
        keys::KARMA.to_owned(),
        keys::top(Period::Day),
        keys::top(Period::All),
        Period::Day.name().to_owned(),
        Period::All.name().to_owned(),
        keys::USER_PREFIX.to_owned(),
        keys::user_articles_suffix(Ranking::Score).to_owned(),
        keys::USER_TOP_INFIX.to_owned(),
        keys::GROUP_PREFIX.to_owned(),
        keys::GROUP_TOP_INFIX.to_owned(),
        keys::ranking_key(Ranking::Score).to_owned(),
        keys::SCORE_CHANNEL.to_owned(),
        keys::VOTING_WINDOW_SECS.to_string(),
        // A net change of -2, +1, -1 and +2 votes.
        format!("{}", -2.0 * keys::VOTE_SCORE),
        format!("{}", keys::VOTE_SCORE),
        format!("{}", -keys::TOP_STEP),
        format!("{}", 2.0 * keys::TOP_STEP),
    ];
    assert_eq!(read, want);
    // The steps are whole: the script's moves are printed as integers.
    assert_eq!(keys::VOTE_SCORE.fract(), 0.0);
    assert_eq!(keys::TOP_STEP.fract(), 0.0);
}

/// A text with a quote, a backslash, a newline and a non-ASCII letter
/// reaches Lua byte for byte.
#[tokio::test]
async fn prelude_texts_are_escaped() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let tricky = "a\"b\\c\nd\u{e9}]]";
    let mut text = Prelude::default()
        .text("x", tricky)
        .texts("xs", [tricky.to_owned(), String::new()])
        .0;
    text.push_str("return {x, xs[1], xs[2]}");
    let read: Vec<String> = q(c, cmd("EVAL").arg(text).arg(0)).await;
    assert_eq!(read, [tricky, tricky, ""]);
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
    let () = q(
        c,
        cmd("HSET")
            .arg(keys::article(odd))
            .arg("groups")
            .arg(format!("news,{odd_name}")),
    )
    .await;

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

/// The score event of a vote counts the keyspace notifications the vote
/// raised on the voted sets, which a subscriber receives just before it
/// (the deriver relies on both: see deriver.rs, `OwnWrites`).
#[tokio::test]
async fn the_event_counts_the_notifications_the_vote_raised() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let mut followed = Followed::start(&redis).await;
    let (id, _) = posted(c, "alice", "counted", &[]).await;
    // The post's own notifications, up to its event.
    let (seen, _) = followed.until_event().await;
    assert!(!seen.is_empty(), "notifications are on");
    for key in &seen {
        assert_eq!(key, &keys::voted(id));
    }

    // (voter, direction, notifications the vote counts, notifications raised)
    let votes = [
        ("bob", VoteDirection::Up, 1, 1),      // sadd
        ("carol", VoteDirection::Down, 2, 2),  // sadd, expire (a new set)
        ("bob", VoteDirection::Down, 2, 2),    // sadd, srem
        ("bob", VoteDirection::Neither, 1, 1), // srem
        // carol leaves the downvoters' set empty: Redis deletes it and
        // says so too, which the vote does not count (the deriver then
        // derives the article, needlessly but safely).
        ("carol", VoteDirection::Neither, 1, 2),
    ];
    for (voter, dir, counted, raised) in votes {
        assert_eq!(vote_as(c, id, voter, dir).await, VoteReply::Changed);
        let (notifications, event) = followed.until_event().await;
        assert_eq!(notifications.len(), raised, "{voter} {dir:?}: {event}");
        assert_eq!(event["notified"], counted, "{voter} {dir:?}: {event}");
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

/// A voter's vote index is kept at their first vote of each rate window:
/// then it drops its closed entries and lives a week and a window more.
/// An index made later in the window gets that lifetime when it is made;
/// the post script and the derivation lengthen a lifetime, never shorten
/// it.
#[tokio::test]
async fn a_vote_index_lives_past_every_vote_of_the_window() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (first, _) = posted(c, "alice", "first", &[]).await;
    let (second, _) = posted(c, "alice", "second", &[]).await;
    let index = keys::user_votes("bob");
    let window = 60;
    let in_window = limit(1000, window);
    let lifetime = (keys::VOTING_WINDOW_SECS + u64::from(window)) as i64;
    let week = keys::VOTING_WINDOW_SECS as i64;
    let bob = user("bob");

    // The window's first vote: a closed entry (written by hand) goes, the
    // index lives a week and a window.
    let () = q(c, cmd("ZADD").arg(&index).arg(1000).arg("article:999")).await;
    vote(c, first, &bob, VoteDirection::Up, in_window)
        .await
        .unwrap();
    let entries: Vec<String> = q(c, cmd("ZRANGE").arg(&index).arg(0).arg(-1)).await;
    assert_eq!(entries, [keys::article(first)]);
    let ttl: i64 = q(c, cmd("TTL").arg(&index)).await;
    assert!((lifetime - 5..=lifetime).contains(&ttl), "{ttl}");

    // Later in the window: a closed entry waits, and an index made anew
    // gets the lifetime.
    let () = q(c, cmd("DEL").arg(&index)).await;
    let () = q(c, cmd("ZADD").arg(&index).arg(1000).arg("article:999")).await;
    vote(c, second, &bob, VoteDirection::Up, in_window)
        .await
        .unwrap();
    let held: i64 = q(c, cmd("ZCARD").arg(&index)).await;
    assert_eq!(held, 2, "the closed entry waits for the next window");
    let ttl: i64 = q(c, cmd("TTL").arg(&index)).await;
    assert!((lifetime - 5..=lifetime).contains(&ttl), "{ttl}");

    // A post (the poster's own upvote) leaves a longer lifetime as it is
    // and lengthens a shorter one to the week.
    posted(c, "bob", "mine", &[]).await;
    let ttl: i64 = q(c, cmd("TTL").arg(&index)).await;
    assert!((lifetime - 5..=lifetime).contains(&ttl), "{ttl}");
    let () = q(c, cmd("EXPIRE").arg(&index).arg(10)).await;
    posted(c, "bob", "again", &[]).await;
    let ttl: i64 = q(c, cmd("TTL").arg(&index)).await;
    assert!((week - 5..=week).contains(&ttl), "{ttl}");
}
