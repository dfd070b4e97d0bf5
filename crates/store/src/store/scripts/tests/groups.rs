//! The set-groups script (added and removed groups, the bound of ten, the
//! poster only, the limit) and the group-page script (a shallow page walked,
//! a deep one built and cached).

use super::*;
use crate::store::keys::{self, At};

async fn set(
    conn: &mut Conn,
    id: ArticleId,
    caller: &str,
    add: &[&str],
    remove: &[&str],
) -> SetGroupsReply {
    set_within(conn, id, caller, (add, remove), unlimited()).await
}

/// Sets `caller`'s groups of `id`, counted against `limit`.
async fn set_within(
    conn: &mut Conn,
    id: ArticleId,
    caller: &str,
    (add, remove): (&[&str], &[&str]),
    limit: RateLimit,
) -> SetGroupsReply {
    let rate = keys::user_rate(caller, crate::rate::RateAction::SetGroups);
    let (add, remove) = (groups(add), groups(remove));
    let groups = (&add[..], &remove[..]);
    let caller = &user(caller);
    set_groups(
        conn,
        (At::SINGLE, id),
        caller,
        groups,
        gate(rate, limit),
        false,
    )
    .await
    .expect("the set-groups script runs")
}

async fn groups_field(conn: &mut Conn, id: ArticleId) -> String {
    q(conn, cmd("HGET").arg(keys::article(id)).arg("groups")).await
}

#[tokio::test]
async fn groups_are_added_and_removed_with_their_cached_rankings() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &["a"]).await;
    let article = keys::article(id);
    let (a, b) = (group("a"), group("b"));
    // b's score ranking is cached, a's net-vote ranking of the week too.
    let b_score = keys::group_ranking(&b, Ranking::Score);
    let () = q(c, cmd("ZADD").arg(&b_score).arg(1).arg("article:99")).await;
    let a_week = keys::group_top(&a, Period::Week);
    let () = q(c, cmd("ZADD").arg(&a_week).arg(1).arg(&article)).await;

    assert_eq!(
        set(c, id, "alice", &["b"], &["a"]).await,
        SetGroupsReply::Done
    );
    assert!(!exists(c, &keys::group(&a)).await);
    assert_eq!(
        zscore(c, keys::GROUPS_BY_SIZE, "a").await,
        None,
        "an empty group leaves the directory"
    );
    assert_eq!(zscore(c, &a_week, &article).await, None);
    let members: Vec<String> = q(c, cmd("SMEMBERS").arg(keys::group(&b))).await;
    assert_eq!(members, std::slice::from_ref(&article));
    assert_eq!(zscore(c, keys::GROUPS_BY_SIZE, "b").await, Some(-1.0));
    let score = zscore(c, keys::SCORE, &article).await;
    assert_eq!(zscore(c, &b_score, &article).await, score);
    assert!(!exists(c, &keys::group_ranking(&b, Ranking::Time)).await);
    assert_eq!(groups_field(c, id).await, "b");
}

#[tokio::test]
async fn more_than_ten_groups_are_refused_and_nothing_is_written() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let names: Vec<String> = (0..GroupName::MAX_PER_ARTICLE)
        .map(|i| format!("g{i}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (id, _) = posted(c, "alice", "hello", &names).await;
    let before = groups_field(c, id).await;

    assert_eq!(
        set(c, id, "alice", &["extra"], &[]).await,
        SetGroupsReply::TooManyGroups
    );
    assert!(!exists(c, &keys::group(&group("extra"))).await);
    assert_eq!(zscore(c, keys::GROUPS_BY_SIZE, "extra").await, None);
    let count: usize = q(c, cmd("SCARD").arg(keys::article_groups(id))).await;
    assert_eq!(count, GroupName::MAX_PER_ARTICLE);
    assert_eq!(groups_field(c, id).await, before);

    // A group it is in already, or one swapped for another, keeps ten.
    assert_eq!(
        set(c, id, "alice", &["g1"], &[]).await,
        SetGroupsReply::Done
    );
    assert_eq!(
        set(c, id, "alice", &["extra"], &["g0"]).await,
        SetGroupsReply::Done
    );
    let count: usize = q(c, cmd("SCARD").arg(keys::article_groups(id))).await;
    assert_eq!(count, GroupName::MAX_PER_ARTICLE);
    assert!(exists(c, &keys::group(&group("extra"))).await);
}

#[tokio::test]
async fn only_the_poster_changes_an_articles_groups() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    assert_eq!(
        set(c, id, "bob", &["a"], &[]).await,
        SetGroupsReply::Forbidden
    );
    assert!(!exists(c, &keys::group(&group("a"))).await);
    assert_eq!(
        set(c, ArticleId(9), "alice", &["a"], &[]).await,
        SetGroupsReply::Missing
    );
    // A poster stored without the user prefix (the book's callers) is
    // the same user.
    hset(c, &keys::article(id), &[("poster", "alice")]).await;
    assert_eq!(set(c, id, "alice", &["a"], &[]).await, SetGroupsReply::Done);

    // The calls above were counted too: the limit starts afresh.
    let counter = keys::user_rate("alice", crate::rate::RateAction::SetGroups);
    let () = q(c, cmd("DEL").arg(counter)).await;
    let once = limit(1, 60);
    let reply = set_within(c, id, "alice", (&["b"], &[]), once).await;
    assert_eq!(reply, SetGroupsReply::Done);
    match set_within(c, id, "alice", (&["c"], &[]), once).await {
        SetGroupsReply::Limited(secs) => assert!((1..=60).contains(&secs)),
        other => panic!("{other:?}"),
    }
    assert!(!exists(c, &keys::group(&group("c"))).await);
}

/// Four articles, the 1st, 3rd and 4th in group `g`; by score, newest first.
async fn four_articles(c: &mut Conn) {
    posted(c, "alice", "one", &["g"]).await;
    posted(c, "alice", "two", &[]).await;
    posted(c, "alice", "three", &["g"]).await;
    posted(c, "alice", "four", &["g"]).await;
}

async fn page(c: &mut Conn, ranks: (isize, isize), budget: u32) -> Vec<String> {
    let call = group_page(At::SINGLE, &group("g"), Ranking::Score, ranks, budget);
    let members: ScoredMembers = run(c, call).await;
    let mut names = Vec::new();
    for (member, score) in members.0 {
        assert_eq!(
            zscore(c, keys::SCORE, &member).await,
            Some(score),
            "{member}"
        );
        names.push(member);
    }
    names
}

#[tokio::test]
async fn a_shallow_group_page_walks_the_ranking_without_caching() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    four_articles(c).await;
    assert_eq!(page(c, (0, 1), 5000).await, ["article:4", "article:3"]);
    assert_eq!(page(c, (1, 2), 5000).await, ["article:3", "article:1"]);
    assert_eq!(page(c, (3, 5), 5000).await, Vec::<String>::new());
    assert!(!exists(c, &keys::group_ranking(&group("g"), Ranking::Score)).await);
    let call = group_page(At::SINGLE, &group("none"), Ranking::Score, (0, 9), 5000);
    let empty: ScoredMembers = run(c, call).await;
    assert_eq!(empty, ScoredMembers(vec![]));
}

#[tokio::test]
async fn past_the_budget_the_group_ranking_is_built_and_cached() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    four_articles(c).await;
    assert_eq!(page(c, (0, 1), 0).await, ["article:4", "article:3"]);
    let cached = keys::group_ranking(&group("g"), Ranking::Score);
    let ttl: i64 = q(c, cmd("TTL").arg(&cached)).await;
    assert!(ttl > 0 && ttl <= keys::GROUP_CACHE_SECS as i64, "{ttl}");
    // The cache answers from now on, whatever the budget.
    let () = q(c, cmd("ZREM").arg(&cached).arg("article:4")).await;
    let call = group_page(At::SINGLE, &group("g"), Ranking::Score, (0, 0), 5000);
    let members: ScoredMembers = run(c, call).await;
    assert_eq!(members.0[0].0, "article:3");
}
