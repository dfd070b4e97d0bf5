//! The post script: an article filed in every ranking and its groups, and
//! the group keys' stride (the book's keys, slugs and the limit are tested
//! through the API: `articles.rs`, `slugs.rs`, `rate_limits.rs`).

use super::*;
use crate::store::keys;

#[tokio::test]
async fn a_post_is_filed_in_every_ranking_and_group() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    // The poster's cached net-vote ranking of the day exists; the others
    // do not, and are not created.
    let day = keys::user_top("alice", Period::Day);
    let () = q(c, cmd("ZADD").arg(&day).arg(1).arg("article:99")).await;

    let (id, _) = posted(c, "alice", "hello-world", &["redis", "lua"]).await;
    let article = keys::article(id);
    let listed: String = q(c, cmd("HGET").arg(&article).arg("groups")).await;
    assert_eq!(listed, "lua,redis", "sorted");
    let t = zscore(c, keys::TIME, &article).await.unwrap();
    let score = zscore(c, keys::SCORE, &article).await.unwrap();
    // The poster's own upvote, in their vote index for a week.
    let ttl: i64 = q(c, cmd("TTL").arg(keys::user_votes("alice"))).await;
    assert!(ttl > keys::VOTING_WINDOW_SECS as i64 - 5, "{ttl}");

    // Net votes 1, then the post time, in every period.
    let top = keys::TOP_STEP + t.floor();
    for period in Period::ALL {
        assert_eq!(zscore(c, &keys::top(period), &article).await, Some(top));
    }
    assert_eq!(zscore(c, &day, &article).await, Some(top));
    assert!(!exists(c, &keys::user_top("alice", Period::Week)).await);
    let mine = keys::user_articles("alice", Ranking::Time);
    assert_eq!(zscore(c, &mine, &article).await, Some(t));
    // The poster's score ranking is a cache: not built by a post, but
    // added to while it exists.
    let mine_by_score = keys::user_articles("alice", Ranking::Score);
    assert!(!exists(c, &mine_by_score).await);
    let () = q(c, cmd("ZADD").arg(&mine_by_score).arg(score).arg(&article)).await;
    let (next, _) = posted(c, "alice", "hello-again", &[]).await;
    let next = keys::article(next);
    let next_score = zscore(c, keys::SCORE, &next).await;
    assert_eq!(zscore(c, &mine_by_score, &next).await, next_score);

    // Its groups, both ways, and the directory's counts.
    for g in ["redis", "lua"] {
        let members: Vec<String> = q(c, cmd("SMEMBERS").arg(keys::group(&group(g)))).await;
        assert_eq!(members, std::slice::from_ref(&article));
        assert_eq!(zscore(c, keys::GROUPS_BY_SIZE, g).await, Some(-1.0));
    }
    let mut named: Vec<String> = q(c, cmd("SMEMBERS").arg(keys::article_groups(id))).await;
    named.sort();
    assert_eq!(named, ["lua", "redis"]);
}

/// Ten groups (the most an article may be in) each get their own keys:
/// the stride of the KEYS per group, passed in ARGV, is right to the last.
#[tokio::test]
async fn each_of_ten_groups_gets_its_own_keys() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let names: Vec<String> = (0..GroupName::MAX_PER_ARTICLE)
        .map(|i| format!("g{i}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let last = group(names[names.len() - 1]);
    let first = group(names[0]);
    let cached = [
        keys::group_ranking(&last, Ranking::Score),
        keys::group_ranking(&last, Ranking::Time),
        keys::group_top(&last, Period::Year),
        keys::group_top(&first, Period::Day),
    ];
    for key in &cached {
        let () = q(c, cmd("ZADD").arg(key).arg(1).arg("article:99")).await;
    }

    let (id, _) = posted(c, "alice", "hello", &names).await;
    let article = keys::article(id);
    for name in &names {
        let set = keys::group(&group(name));
        let member: bool = q(c, cmd("SISMEMBER").arg(set).arg(&article)).await;
        assert!(member, "{name}");
        assert_eq!(zscore(c, keys::GROUPS_BY_SIZE, name).await, Some(-1.0));
    }
    let t = zscore(c, keys::TIME, &article).await.unwrap();
    let score = zscore(c, keys::SCORE, &article).await;
    assert_eq!(zscore(c, &cached[0], &article).await, score);
    assert_eq!(zscore(c, &cached[1], &article).await, Some(t));
    let top = Some(keys::TOP_STEP + t.floor());
    assert_eq!(zscore(c, &cached[2], &article).await, top);
    assert_eq!(zscore(c, &cached[3], &article).await, top);
    // Rankings of the groups not cached stay missing.
    assert!(!exists(c, &keys::group_ranking(&first, Ranking::Score)).await);
    assert!(!exists(c, &keys::group_top(&last, Period::Day)).await);
}

/// The posted event names the article and its groups.
#[tokio::test]
async fn the_posted_event_names_the_article_and_its_groups() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let mut followed = Followed::start(&redis).await;
    for groups in [vec!["news", "rust"], vec![]] {
        let (id, _) = posted(c, "alice", "named", &groups).await;
        let (_, event) = followed.until_event().await;
        assert_eq!(event["id"], id.0.to_string(), "{event}");
        if groups.is_empty() {
            assert_eq!(event["groups"], serde_json::json!({}), "cjson's empty list");
        } else {
            assert_eq!(event["groups"], serde_json::json!(groups), "{event}");
        }
    }
}
