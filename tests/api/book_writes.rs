//! The book's own code as a writer of the shared Redis: its Python
//! functions (`tests/book/`, run unmodified) write while votegraph runs,
//! and every view follows within a second: `myVote`, `Article.groups`,
//! every order, group and user feeds and counts, the group directory, and
//! the live events. Also: a write missed while disconnected followed after
//! reconnecting, an idle server sweeping nothing, two
//! instances deriving one write once, old data imported while running,
//! the book's own unittest, and the cost of reading book-written articles.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    command_stats, eventually, gql_at, health_at, ids, kill_pubsub_connections, needed, now,
    reads_processed, reset_command_stats, spawn_app, spawn_app_on, spawn_server, test_settings,
    Book, Instance, Program, Subscriptions::Exactly, TestApp, TestRedis, WsClient, TRANSPORT_WS,
};

/// The promise: every view agrees with the book's keys within a second.
const WITHIN: Duration = Duration::from_secs(1);

/// How long a subscription may take to start.
const SUBSCRIBED: Duration = Duration::from_secs(5);

const ORDERS: [&str; 7] = [
    "SCORE",
    "NEWEST",
    "TOP_DAY",
    "TOP_WEEK",
    "TOP_MONTH",
    "TOP_YEAR",
    "TOP_ALL",
];

/// The site's pages in every order, as `order -> [id]`.
async fn every_order(app: &TestApp, group: Option<&str>) -> Value {
    let mut seen = serde_json::Map::new();
    for order in ORDERS {
        let query = match group {
            None => format!("{{ articles(order: {order}) {{ id }} }}"),
            Some(g) => {
                format!("{{ group(name: \"{g}\") {{ articles(order: {order}) {{ id }} }} }}")
            }
        };
        let data = app.gql_ok(&query, json!({}), None).await;
        let list = match group {
            None => &data["articles"],
            Some(_) => &data["group"]["articles"],
        };
        seen.insert(order.to_owned(), json!(ids(list)));
    }
    Value::Object(seen)
}

fn in_every_order(ids: &[&str]) -> Value {
    let mut want = serde_json::Map::new();
    for order in ORDERS {
        want.insert(order.to_owned(), json!(ids));
    }
    Value::Object(want)
}

async fn article(app: &TestApp, id: &str, token: Option<&str>) -> Value {
    let query = "query($id: ID!) { article(id: $id) { id votes downvotes groups myVote poster { name karma } } }";
    app.gql_ok(query, json!({ "id": id }), token).await["article"].clone()
}

async fn directory(app: &TestApp) -> Value {
    let data = app
        .gql_ok(
            "{ groups { edges { node { name articleCount } } } }",
            json!({}),
            None,
        )
        .await;
    json!(data["groups"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["node"]["name"].clone(), e["node"]["articleCount"].clone()))
        .collect::<Vec<_>>())
}

/// Waits until `voter`'s upvote and the group `group`, written by the book
/// on article `id` (by `alice`, who has no other vote), show everywhere.
async fn vote_and_group_followed(
    app: &TestApp,
    id: &str,
    voter: &str,
    group: &str,
    within: Duration,
) {
    eventually("the book's vote and group followed", within, async || {
        let a = article(app, id, Some(voter)).await;
        let top = every_order(app, None).await;
        let dir = directory(app).await;
        let ok = a["myVote"] == "UP"
            && a["groups"] == json!([group])
            && a["poster"]["karma"] == 2
            && top == in_every_order(&[id])
            && dir == json!([[group, 1]]);
        ok.then_some(()).ok_or((a, top, dir))
    })
    .await;
}

#[tokio::test]
async fn a_book_post_reaches_every_view_and_is_announced_within_a_second() {
    if needed(
        "a_book_post_reaches_every_view_and_is_announced_within_a_second",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let book = Book::on(&app.redis);
    let mut ws = WsClient::connect(&app, TRANSPORT_WS).await;
    ws.subscribe(
        "1",
        "subscription { articlePosted { id title groups } }",
        json!({}),
    )
    .await;
    app.wait_for_subscriptions(Exactly(1), SUBSCRIBED).await;

    // The book's post, then its groups, as its code runs them.
    let replies = book
        .batch(&[
            vec![
                "post".into(),
                "user:alice".into(),
                "From the book".into(),
                "https://example.com/".into(),
            ],
            vec![
                "groups".into(),
                "1".into(),
                "--add".into(),
                "rust".into(),
                "news".into(),
            ],
        ])
        .await;
    assert_eq!(replies[0], "1");

    let event = ws.next_event().await;
    assert_eq!(event["articlePosted"]["id"], "1", "{event}");
    assert_eq!(event["articlePosted"]["title"], "From the book");
    eventually("the book's post in every order", WITHIN, async || {
        let seen = every_order(&app, None).await;
        (seen == in_every_order(&["1"])).then_some(()).ok_or(seen)
    })
    .await;
    eventually("its groups, feeds, directory, poster", WITHIN, async || {
        let a = article(&app, "1", Some(&alice)).await;
        let rust = every_order(&app, Some("rust")).await;
        let dir = directory(&app).await;
        let me = app
            .gql_ok(
                "{ me { karma articles { id } feed(order: TOP_DAY) { edges { node { id } } } } }",
                json!({}),
                Some(&alice),
            )
            .await;
        let ok = a["groups"] == json!(["news", "rust"])
            && a["myVote"] == "UP"
            && a["poster"] == json!({ "name": "alice", "karma": 1 })
            && rust == in_every_order(&["1"])
            && dir == json!([["news", 1], ["rust", 1]])
            && me["me"]["karma"] == 1
            && ids(&me["me"]["articles"]) == ["1"]
            && me["me"]["feed"]["edges"][0]["node"]["id"] == "1";
        ok.then_some(()).ok_or((a, rust, dir, me))
    })
    .await;
    ws.close().await;
}

#[tokio::test]
async fn book_votes_downvotes_and_switches_reach_my_vote_rankings_karma_and_subscribers() {
    if needed(
        "book_votes_downvotes_and_switches_reach_my_vote_rankings_karma_and_subscribers",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    let book = Book::on(&app.redis);
    // One article by the book, one by votegraph, both in one group.
    let first = book.post("user:alice", "by the book").await;
    book.groups(&first, &["rust"], &[]).await;
    let second = app.post(&alice, "by votegraph", &["rust"]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(second, "2");
    // Warm the cached group rankings, which must follow too.
    eventually("both in the group", WITHIN, async || {
        let seen = every_order(&app, Some("rust")).await;
        (seen["TOP_DAY"].as_array().map(Vec::len) == Some(2))
            .then_some(())
            .ok_or(seen)
    })
    .await;
    let mut ws = WsClient::connect(&app, TRANSPORT_WS).await;
    ws.subscribe(
        "1",
        "subscription { scoreChanged(group: \"rust\") { article { id } votes downvotes } }",
        json!({}),
    )
    .await;
    app.wait_for_subscriptions(Exactly(1), SUBSCRIBED).await;

    // Two book upvotes lift the book's article above votegraph's in every
    // net-vote order, the group's included.
    book.vote("user:bob", &first).await;
    book.vote("user:carol", &first).await;
    let event = ws.next_event().await;
    assert_eq!(
        event["scoreChanged"]["article"]["id"],
        first.as_str(),
        "{event}"
    );
    eventually("the book's votes everywhere", WITHIN, async || {
        let site = every_order(&app, None).await;
        let group = every_order(&app, Some("rust")).await;
        let by_bob = article(&app, &first, Some(&bob)).await;
        let ok = ["TOP_DAY", "TOP_WEEK", "TOP_ALL", "SCORE"].iter().all(|o| {
            site[o] == json!([first.as_str(), "2"]) && group[o] == json!([first.as_str(), "2"])
        }) && by_bob["myVote"] == "UP"
            && by_bob["votes"] == 3
            && by_bob["poster"]["karma"] == 4;
        ok.then_some(()).ok_or((site, group, by_bob))
    })
    .await;

    // The exercise: carol's vote switches to a downvote, bob's stays, and
    // a third user downvotes; net votes 3 - 2 = 1... then 1 - 1 (dave).
    book.switch("user:carol", &first).await;
    book.downvote("user:dave", &first).await;
    eventually("the switch and the downvote", WITHIN, async || {
        let by_carol = article(&app, &first, Some(&carol)).await;
        let site = every_order(&app, None).await;
        let ok = by_carol["myVote"] == "DOWN"
            && by_carol["votes"] == 2
            && by_carol["downvotes"] == 2
            && by_carol["poster"]["karma"] == 1
            // Net 0 now, below votegraph's article (net 1) in TOP_*.
            && site["TOP_DAY"] == json!(["2", first.as_str()]);
        ok.then_some(()).ok_or((by_carol, site))
    })
    .await;
    // Every change was announced, to the group's subscriber too.
    let mut last = Value::Null;
    eventually("the last change announced", WITHIN, async || {
        last = ws.next_event().await;
        let change = &last["scoreChanged"];
        (change["votes"] == 2 && change["downvotes"] == 2)
            .then_some(())
            .ok_or(last.clone())
    })
    .await;
    ws.close().await;
}

#[tokio::test]
async fn groups_the_book_adds_and_removes_are_followed() {
    if needed(
        "groups_the_book_adds_and_removes_are_followed",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let book = Book::on(&app.redis);
    let id = app.post(&alice, "votegraph's", &["rust"]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A group only the book writes, and a removal from votegraph's group.
    book.groups(&id, &["bookonly"], &["rust"]).await;
    eventually("the book's group changes", WITHIN, async || {
        let a = article(&app, &id, None).await;
        let dir = directory(&app).await;
        let group = app
            .gql_ok(
                "{ group(name: \"bookonly\") { articleCount articles(order: TOP_DAY) { id } } }",
                json!({}),
                None,
            )
            .await;
        let ok = a["groups"] == json!(["bookonly"])
            && dir == json!([["bookonly", 1]])
            && group["group"]["articleCount"] == 1
            && ids(&group["group"]["articles"]) == [id.as_str()];
        ok.then_some(()).ok_or((a, dir, group))
    })
    .await;
    // votegraph's own setGroups still works on what the book wrote.
    app.gql_ok(
        "mutation($id: ID!) { setGroups(articleId: $id, remove: [\"bookonly\"], add: [\"rust\"]) { groups } }",
        json!({ "id": id }),
        Some(&alice),
    )
    .await;
    let mut conn = app.redis.conn().await;
    let members: Vec<String> = redis::cmd("SMEMBERS")
        .arg("group:bookonly")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(members.is_empty(), "{members:?}");
    assert_eq!(article(&app, &id, None).await["groups"], json!(["rust"]));
    assert_eq!(directory(&app).await, json!([["rust", 1]]));
}

/// A Redis that refuses `CONFIG SET` (a managed service, a renamed
/// command): `/health` says so, and the sweep alone follows the book.
#[tokio::test]
async fn where_notifications_are_refused_the_sweep_follows_alone() {
    if needed(
        "where_notifications_are_refused_the_sweep_follows_alone",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let redis = TestRedis::start_with(&["--rename-command", "CONFIG", ""]).await;
    let app = spawn_app_on(redis, |s| s.top_upkeep_ms = 100).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    eventually("refused on /health", Duration::from_secs(5), async || {
        let health = app.health().await;
        (health["deriver"]["notifications"] == "refused" && health["status"] == "ok")
            .then_some(())
            .ok_or(health)
    })
    .await;
    let book = Book::on(&app.redis);
    let id = book.post("user:alice", "swept").await;
    book.vote("user:bob", &id).await;
    book.groups(&id, &["swept"], &[]).await;
    vote_and_group_followed(&app, &id, &bob, "swept", Duration::from_secs(5)).await;
    let me = app
        .gql_ok("{ me { karma } }", json!({}), Some(&alice))
        .await;
    assert_eq!(me["me"]["karma"], 2);
}

#[tokio::test]
async fn two_instances_derive_a_book_write_once() {
    if needed("two_instances_derive_a_book_write_once", Program::Python).is_none() {
        return;
    }
    let app = spawn_app().await;
    let other = spawn_server(test_settings(&app.redis)).await;
    let alice = app.sign_up("alice").await;
    let book = Book::on(&app.redis);
    let id = book.post("user:alice", "shared").await;
    eventually("the post derived", WITHIN, async || {
        let a = article(&app, &id, None).await;
        (a["poster"]["karma"] == 1).then_some(()).ok_or(a)
    })
    .await;
    let mut here = WsClient::connect(&app, TRANSPORT_WS).await;
    here.subscribe(
        "1",
        "subscription { scoreChanged { article { id } votes } }",
        json!({}),
    )
    .await;
    let mut there = WsClient::connect_to(&other.address, TRANSPORT_WS, json!({})).await;
    there
        .subscribe(
            "1",
            "subscription { scoreChanged { article { id } votes } }",
            json!({}),
        )
        .await;
    app.wait_for_subscriptions(Exactly(1), SUBSCRIBED).await;
    crate::helpers::wait_for_subscriptions_at(&app.client, &other.address, Exactly(1), SUBSCRIBED)
        .await;

    book.vote("user:bob", &id).await;
    for ws in [&mut here, &mut there] {
        let event = ws.next_event().await;
        assert_eq!(event["scoreChanged"]["votes"], 2, "{event}");
        // Once: both instances derived the vote, only the first changed
        // anything (and published).
        assert!(ws.is_quiet(Duration::from_millis(500)).await);
    }
    let a = article(&app, &id, Some(&alice)).await;
    assert_eq!(a["poster"]["karma"], 2, "karma counted once: {a}");
    let seen = gql_at(
        &app.client,
        &other.address,
        "{ articles(order: TOP_DAY) { id votes } }",
        json!({}),
        None,
        None,
    )
    .await;
    assert_eq!(seen["data"]["articles"], json!([{ "id": id, "votes": 2 }]));
    here.close().await;
    there.close().await;
}

/// votegraph's own votes and posts are derived again like any write, on
/// every instance; the derivation finds them right and changes nothing:
/// no karma, vote or event counted twice.
#[tokio::test]
async fn votegraphs_own_votes_and_posts_derive_to_no_change() {
    own_writes_change_nothing(TestRedis::start().await).await;
}

/// Likewise where the server notifies every type (`A`, `z` included): the
/// votes' `ZINCRBY score:` is not `score:` replaced as a whole, so it
/// starts no full pass.
#[tokio::test]
async fn members_written_to_score_do_not_derive_everything() {
    own_writes_change_nothing(TestRedis::start_with(&["--notify-keyspace-events", "KA"]).await)
        .await;
}

async fn own_writes_change_nothing(redis: TestRedis) {
    let app = spawn_app_on(redis, |_| {}).await;
    let other = spawn_server(test_settings(&app.redis)).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    let id = app.post(&alice, "voted on", &["news"]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    both_idle(&app, &other).await;
    let mut ws = WsClient::connect(&app, TRANSPORT_WS).await;
    ws.subscribe(
        "1",
        "subscription { scoreChanged { article { id } votes } }",
        json!({}),
    )
    .await;
    app.wait_for_subscriptions(Exactly(1), SUBSCRIBED).await;
    let before = deriver_counts(&app, &other).await;
    // An upvote, a first downvote (its set made, with an expiry), a
    // switch and a cleared vote, each derived before the next.
    let votes = [
        (&bob, "UP"),
        (&carol, "DOWN"),
        (&bob, "DOWN"),
        (&bob, "NONE"),
    ];
    for (token, direction) in votes {
        app.vote_as(token, &id, direction).await;
        both_idle(&app, &other).await;
    }
    for _ in votes {
        ws.next_event().await;
    }
    assert!(
        ws.is_quiet(Duration::from_millis(300)).await,
        "an event twice"
    );
    ws.close().await;
    let a = article(&app, &id, Some(&alice)).await;
    assert_eq!(
        (a["votes"].clone(), a["downvotes"].clone()),
        (json!(1), json!(1)),
        "{a}"
    );
    assert_eq!(a["poster"]["karma"], 0, "{a}");

    // Posts: the article's voted set and each group's set are notified.
    for groups in [vec!["news", "rust"], vec![]] {
        app.post(&bob, "posted", &groups).await;
        both_idle(&app, &other).await;
    }
    let after = deriver_counts(&app, &other).await;
    assert!(after.0 > before.0, "the writes were derived: {after:?}");
    assert_eq!(after.1, before.1, "derivations changed something");
    assert_eq!(after.2, before.2, "a full pass ran");
    let news = app
        .gql_ok(
            "{ group(name: \"news\") { articleCount } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(news["group"]["articleCount"], 2, "{news}");
}

async fn both_idle(app: &TestApp, other: &Instance) {
    app.wait_for_derivations().await;
    let other = other.address.clone();
    eventually("the other deriver idle", SUBSCRIBED, async || {
        let deriver = health_at(&app.client, &other).await["deriver"].clone();
        (deriver["pending"] == 0 && deriver["busy"] == false)
            .then_some(())
            .ok_or(deriver)
    })
    .await;
}

/// Both instances' notifications received, derivations that changed
/// something, and full passes.
async fn deriver_counts(app: &TestApp, other: &Instance) -> (u64, u64, u64) {
    let mut counts = (0, 0, 0);
    for health in [
        app.health().await,
        health_at(&app.client, &other.address).await,
    ] {
        let n = |field: &str| health["deriver"][field].as_u64().unwrap();
        counts.0 += n("received");
        counts.1 += n("derived");
        counts.2 += n("passes");
    }
    counts
}

/// An idle server with notifications on runs no sweep and no full pass
/// after the one it starts with, however short its upkeep round.
#[tokio::test]
async fn an_idle_server_sweeps_nothing() {
    let redis = TestRedis::start().await;
    let app = spawn_app_on(redis, |s| s.top_upkeep_ms = 50).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "idle", &["news"]).await;
    eventually("the first pass", Duration::from_secs(5), async || {
        let deriver = app.health().await["deriver"].clone();
        (deriver["notifications"] == "on" && deriver["passes"] == 1)
            .then_some(())
            .ok_or(deriver)
    })
    .await;
    app.wait_for_derivations().await;
    let before = app.health().await["deriver"]["sweepRounds"].clone();
    let mut conn = app.redis.conn().await;
    reset_command_stats(&mut conn).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let deriver = app.health().await["deriver"].clone();
    assert_eq!(deriver["passes"], 1, "{deriver}");
    assert_eq!(deriver["sweepRounds"], before, "{deriver}");
    // The upkeep's pruning runs; nothing scans the keyspace.
    let stats = command_stats(&mut conn).await;
    assert!(!stats.contains_key("scan"), "{stats:?}");
}

/// A write made while the listener is disconnected is followed once it
/// reconnects: the reconnect runs a full pass.
#[tokio::test]
async fn a_write_missed_while_disconnected_is_followed_after_reconnecting() {
    if needed(
        "a_write_missed_while_disconnected_is_followed_after_reconnecting",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let redis = TestRedis::start().await;
    let app = spawn_app_on(redis, |_| {}).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let id = app.post(&alice, "missed", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually("the first pass", Duration::from_secs(5), async || {
        let deriver = app.health().await["deriver"].clone();
        (deriver["notifications"] == "on" && deriver["passes"] == 1)
            .then_some(())
            .ok_or(deriver)
    })
    .await;
    // Redis stops sending notifications and the listener's connection is
    // killed: nothing names the book's writes.
    let mut conn = app.redis.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(kill_pubsub_connections(&mut conn).await >= 1);
    let book = Book::on(&app.redis);
    book.vote("user:bob", &id).await;
    book.groups(&id, &["missed"], &[]).await;
    // The upkeep's round is a minute here: no sweep runs meanwhile.
    vote_and_group_followed(&app, &id, &bob, "missed", Duration::from_secs(5)).await;
    // The listener came back and turned notifications on again.
    eventually("notifications on again", SUBSCRIBED, async || {
        let flags: (String, String) = redis::cmd("CONFIG")
            .arg("GET")
            .arg("notify-keyspace-events")
            .query_async(&mut conn)
            .await
            .unwrap();
        let deriver = app.health().await["deriver"].clone();
        (deriver["notifications"] == "on" && flags.1.contains('K') && deriver["passes"] == 2)
            .then_some(())
            .ok_or((deriver, flags))
    })
    .await;
    assert_eq!(app.health().await["deriver"]["sweepRounds"], 0);
}

#[tokio::test]
async fn old_book_data_imported_while_running_reaches_the_long_orders() {
    if needed(
        "old_book_data_imported_while_running_reaches_the_long_orders",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let book = Book::on(&app.redis);
    let mut ws = WsClient::connect(&app, TRANSPORT_WS).await;
    ws.subscribe("1", "subscription { articlePosted { id } }", json!({}))
        .await;
    app.wait_for_subscriptions(Exactly(1), SUBSCRIBED).await;
    let day = 86_400.0;
    let month_ago = format!("{:.3}", now() - 20.0 * day);
    let year_ago = format!("{:.3}", now() - 200.0 * day);
    let ancient = format!("{:.3}", now() - 800.0 * day);
    let old: Vec<Vec<String>> = [&month_ago, &year_ago, &ancient]
        .iter()
        .map(|at| {
            vec![
                "post-at".into(),
                (*at).clone(),
                "user:alice".into(),
                format!("from {at}"),
                "https://example.com/".into(),
            ]
        })
        .collect();
    let replies = book.batch(&old).await;
    assert_eq!(replies, [json!("1"), json!("2"), json!("3")]);
    eventually(
        "old articles in the orders of their age",
        WITHIN,
        async || {
            let seen = every_order(&app, None).await;
            let want = json!({
                "SCORE": ["1", "2", "3"], "NEWEST": ["1", "2", "3"],
                "TOP_DAY": [], "TOP_WEEK": [], "TOP_MONTH": ["1"],
                "TOP_YEAR": ["1", "2"], "TOP_ALL": ["1", "2", "3"],
            });
            (seen == want).then_some(()).ok_or(seen)
        },
    )
    .await;
    let me = app
        .gql_ok(
            "{ me { karma articles(order: NEWEST) { id } } }",
            json!({}),
            Some(&alice),
        )
        .await;
    assert_eq!(me["me"]["karma"], 3);
    assert_eq!(ids(&me["me"]["articles"]), ["1", "2", "3"]);
    // An import is not news: no articlePosted for it.
    assert!(ws.is_quiet(Duration::from_millis(300)).await);
    ws.close().await;
}

/// Old book data restored while votegraph runs (RESTORE of the book's
/// keys from a backup, `time:` and `score:` replaced whole): every order
/// follows the restored keys, old articles in the long orders only, and
/// articles the restore removed leave them.
#[tokio::test]
async fn old_book_data_restored_while_running_replaces_what_was_derived() {
    if needed(
        "old_book_data_restored_while_running_replaces_what_was_derived",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    for title in ["gone 1", "gone 2"] {
        app.post(&alice, title, &[]).await;
    }
    assert_eq!(every_order(&app, None).await["TOP_DAY"], json!(["2", "1"]));
    // The backup: the book's code, a while ago, on another Redis.
    let backup = TestRedis::start().await;
    let old_book = Book::on(&backup);
    let day = 86_400.0;
    let mut calls = Vec::new();
    for (n, age) in [(1, 40.0), (2, 3.0), (3, 400.0)] {
        calls.push(vec![
            "post-at".into(),
            format!("{:.3}", now() - age * day),
            "user:alice".into(),
            format!("restored {n}"),
            "https://example.com/".into(),
        ]);
    }
    old_book.batch(&calls).await;
    old_book.vote("user:bob", "2").await;
    let mut from = backup.conn().await;
    let mut to = app.redis.conn().await;
    let mut keys = vec![
        "time:".to_owned(),
        "score:".to_owned(),
        "article:".to_owned(),
    ];
    for id in 1..=3 {
        keys.push(format!("article:{id}"));
        keys.push(format!("voted:{id}"));
    }
    for key in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(&mut from)
            .await
            .unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut from)
            .await
            .unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg(&key)
            .arg(ttl.max(0))
            .arg(dump)
            .arg("REPLACE")
            .query_async(&mut to)
            .await
            .unwrap();
    }
    eventually(
        "the restored book data in every order",
        WITHIN,
        async || {
            let seen = every_order(&app, None).await;
            let want = json!({
                "SCORE": ["2", "1", "3"], "NEWEST": ["2", "1", "3"],
                "TOP_DAY": [], "TOP_WEEK": ["2"], "TOP_MONTH": ["2"],
                "TOP_YEAR": ["2", "1"], "TOP_ALL": ["2", "1", "3"],
            });
            (seen == want).then_some(()).ok_or(seen)
        },
    )
    .await;
    let restored = article(&app, "2", Some(&alice)).await;
    assert_eq!(restored["votes"], 2, "{restored}");
    assert_eq!(restored["myVote"], "UP", "{restored}");
}

#[tokio::test]
async fn the_books_own_unittest_passes_on_the_redis_votegraph_uses() {
    if needed(
        "the_books_own_unittest_passes_on_the_redis_votegraph_uses",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "votegraph's", &["new-group"]).await;
    let book = Book::on(&app.redis);
    let (passed, output) = book.unittest().await;
    assert!(passed, "{output}");
    // Its cleanup deletes time:*, score:*, voted:* and group:* on the way
    // out; votegraph follows: every order is as empty as the book's
    // rankings, TOP_* included.
    eventually(
        "every order empty, as the book's rankings",
        WITHIN,
        async || {
            let seen = every_order(&app, None).await;
            (seen == in_every_order(&[])).then_some(()).ok_or(seen)
        },
    )
    .await;
    let health = app.health().await;
    assert_eq!(health["status"], "ok");
}

/// A logged-in front page of 25 book-written articles, once derived,
/// costs what votegraph's own cost: no third round trip for their groups,
/// at most 30 commands.
#[tokio::test]
async fn book_written_articles_read_as_cheaply_as_votegraphs() {
    if needed(
        "book_written_articles_read_as_cheaply_as_votegraphs",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let book = Book::on(&app.redis);
    let posts: Vec<Vec<String>> = (0..25)
        .map(|n| {
            vec![
                "post".into(),
                "user:alice".into(),
                format!("book {n}"),
                "https://example.com/".into(),
            ]
        })
        .collect();
    book.batch(&posts).await;
    let mut conn = app.redis.conn().await;
    eventually("25 derived", WITHIN, async || {
        let mut pipe = redis::pipe();
        for id in 1..=25 {
            pipe.cmd("HEXISTS")
                .arg(format!("article:{id}"))
                .arg("indexed");
        }
        let derived: Vec<bool> = pipe.query_async(&mut conn).await.unwrap();
        derived.iter().all(|d| *d).then_some(()).ok_or(derived)
    })
    .await;
    let book_page = page_cost(&app, &alice).await;
    assert!(book_page.commands <= 30, "{book_page:?}");
    assert_eq!(book_page.smembers, 0, "no group sets read: {book_page:?}");
    // votegraph's own 25 articles, newer, on the same page: the same cost.
    for n in 0..25 {
        app.post(&alice, &format!("own {n}"), &["rust"]).await;
    }
    app.wait_for_derivations().await;
    let own_page = page_cost(&app, &alice).await;
    assert_eq!(
        (book_page.commands, book_page.round_trips),
        (own_page.commands, own_page.round_trips),
        "book: {book_page:?}, own: {own_page:?}"
    );
}

#[derive(Debug)]
struct PageCost {
    commands: u64,
    round_trips: u64,
    smembers: u64,
}

/// What the first logged-in read of the front page costs Redis (its
/// template is computed, see `templates.rs`).
async fn page_cost(app: &TestApp, token: &str) -> PageCost {
    let query = format!(
        "{{ articles {{ {} myVote }} }}",
        crate::helpers::ARTICLE_FIELDS
    );
    // Another page loads the script that reads a reader's session and
    // votes, as any server's first logged-in page does once.
    let other = "{ articles(pageSize: 1) { id myVote } }";
    app.gql_ok(other, json!({}), Some(token)).await;
    let mut conn = app.redis.conn().await;
    reset_command_stats(&mut conn).await;
    // Two reads of the counter: their difference is the cost of reading it.
    let r0 = reads_processed(&mut conn).await;
    let r1 = reads_processed(&mut conn).await;
    let data = app.gql_ok(&query, json!({}), Some(token)).await;
    let r2 = reads_processed(&mut conn).await;
    let stats = command_stats(&mut conn).await;
    let articles = data["articles"].as_array().unwrap();
    assert_eq!(articles.len(), 25);
    assert!(articles.iter().all(|a| a["myVote"] == "UP"), "{data}");
    PageCost {
        commands: stats.values().sum(),
        round_trips: (r2 - r1) - (r1 - r0),
        smembers: stats.get("smembers").copied().unwrap_or(0),
    }
}

/// The book writes a post in several commands and only the first (its
/// voted set) is notified: a derivation that runs between them finds the
/// article missing from `time:` and tries again, so the post is followed
/// within a second of its last write even when its writes are spread out.
#[tokio::test]
async fn a_book_post_written_slowly_is_still_followed() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    // post_article's first commands: the id, the poster's vote, its expiry.
    let id: u64 = redis::cmd("INCR")
        .arg("article:")
        .query_async(&mut conn)
        .await
        .unwrap();
    let voted = format!("voted:{id}");
    let () = redis::pipe()
        .cmd("SADD")
        .arg(&voted)
        .arg("user:alice")
        .ignore()
        .cmd("EXPIRE")
        .arg(&voted)
        .arg(7 * 86_400)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    // Long enough for the deriver to take the notification and find the
    // article missing, more than once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let now = secs as f64 + micros as f64 / 1e6;
    let article = format!("article:{id}");
    let () = redis::cmd("HSET")
        .arg(&article)
        .arg(&[
            ("title", "Written slowly"),
            ("link", "https://example.com/"),
            ("poster", "user:alice"),
        ])
        .arg("time")
        .arg(now)
        .arg("votes")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    for (key, value) in [("score:", now + 432.0), ("time:", now)] {
        let () = redis::cmd("ZADD")
            .arg(key)
            .arg(value)
            .arg(&article)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    // Watched in Redis, not through pages: a page that lists an article
    // never derived asks for its derivation itself.
    eventually("the slow post derived", WITHIN, async || {
        let (top, indexed): (Option<f64>, bool) = redis::pipe()
            .cmd("ZSCORE")
            .arg("top:all")
            .arg(&article)
            .cmd("HEXISTS")
            .arg(&article)
            .arg("indexed")
            .query_async(&mut conn)
            .await
            .unwrap();
        (top.is_some() && indexed)
            .then_some(())
            .ok_or((top, indexed))
    })
    .await;
    let id = id.to_string();
    assert_eq!(
        every_order(&app, None).await,
        in_every_order(&[id.as_str()])
    );
}
