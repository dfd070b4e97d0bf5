//! The round-trip contract, in one place: a page costs two round trips and
//! a bounded number of commands, counted by Redis itself
//! (`total_reads_processed`, `commandstats`), and on a cluster one request
//! per node per round trip, as the server's `/metrics` counts its Redis
//! requests. Every other test file tests behaviour.

use std::time::Duration;

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::helpers::{
    command_calls, command_stats, done_if, eventually, gql_at, pause_redis, reads_processed,
    reset_command_stats, sign_up_at, spawn_app, spawn_app_with, spawn_server, test_settings_for,
    TestApp, TestCluster, WsClient, ARTICLE_FIELDS, TRANSPORT_WS,
};
use crate::metrics::metrics_text;

/// What one run of a query cost Redis.
struct Cost {
    round_trips: u64,
    /// Calls of each command, in lower case.
    commands: HashMap<String, u64>,
}

impl Cost {
    fn calls(&self, command: &str) -> u64 {
        self.commands.get(command).copied().unwrap_or(0)
    }
}

/// Runs `query` as `token`'s reader (None: anonymous) and returns what it
/// cost once warm.
async fn cost_of(app: &TestApp, query: &str, token: Option<&str>) -> Cost {
    let mut redis = app.redis.conn().await;
    // Warm the pool so connection set-up is not counted.
    app.gql_ok(query, json!({}), token).await;
    app.gql_ok(query, json!({}), token).await;
    app.wait_for_derivations().await;
    let r0 = reads_processed(&mut redis).await;
    let r1 = reads_processed(&mut redis).await;
    let own = r1 - r0; // what one INFO costs
    let before = command_stats(&mut redis).await;
    let r2 = reads_processed(&mut redis).await;
    app.gql_ok(query, json!({}), token).await;
    let r3 = reads_processed(&mut redis).await;
    let after = command_stats(&mut redis).await;
    let commands = after
        .into_iter()
        .filter(|(name, _)| name != "info")
        .map(|(name, calls)| {
            let delta = calls - before.get(&name).copied().unwrap_or(0);
            (name, delta)
        })
        .filter(|(_, delta)| *delta > 0)
        .collect();
    Cost {
        round_trips: r3 - r2 - own,
        commands,
    }
}

/// alice's `n` articles, titled "article 0"… on no group; her token.
async fn posted_by_alice(app: &TestApp, n: usize) -> String {
    let alice = app.sign_up("alice").await;
    for i in 0..n {
        app.post(&alice, &format!("article {i}"), &[]).await;
    }
    alice
}

async fn seeded_app() -> TestApp {
    // The response cache would answer repeated anonymous queries with no
    // Redis work at all; these tests measure the Redis work itself.
    let app = spawn_app_with(|s| s.no_response_cache = true).await;
    let alice = app.sign_up("alice").await;
    for i in 0..30 {
        let groups: &[&str] = if i % 2 == 0 {
            &["even", "all"]
        } else {
            &["all"]
        };
        app.post(&alice, &format!("article {i}"), groups).await;
    }
    app
}

#[tokio::test]
async fn a_page_of_25_articles_costs_two_round_trips() {
    let app = seeded_app().await;
    let query = format!("{{ articles(pageSize: 25) {{ {ARTICLE_FIELDS} }} }}");
    let cost = cost_of(&app, &query, None).await;
    let trips = cost.round_trips;
    assert_eq!(cost.calls("hmget"), 25, "every article was read");
    assert!(trips <= 2, "a page took {trips} round trips to Redis");
    assert!(trips >= 1);
}

#[tokio::test]
async fn several_lists_in_one_query_cost_one_batch_each() {
    let app = seeded_app().await;
    let query = format!(
        "{{ top: articles(pageSize: 25) {{ {ARTICLE_FIELDS} }} \
           newest: articles(order: NEWEST, pageSize: 25) {{ {ARTICLE_FIELDS} }} \
           group(name: \"even\") {{ articles {{ {ARTICLE_FIELDS} }} }} \
           one: article(id: \"3\") {{ {ARTICLE_FIELDS} }} }}"
    );
    let cost = cost_of(&app, &query, None).await;
    let (trips, article_reads) = (cost.round_trips, cost.calls("hmget"));
    // Each list is one range read plus one pipeline for its whole page (a
    // page knows all its ids, so it does not wait to share a batch), and the
    // single article is one more batch: 7 round trips for 66 article slots,
    // where one per article would be 69.
    assert_eq!(article_reads, 25 + 25 + 15 + 1, "every slot read once");
    assert!(
        trips <= 7,
        "three lists and an article took {trips} round trips"
    );
}

#[tokio::test]
async fn articles_asked_for_by_id_share_one_batch() {
    let app = seeded_app().await;
    let query = format!(
        "{{ a: article(id: \"1\") {{ {ARTICLE_FIELDS} }} \
           b: article(id: \"2\") {{ {ARTICLE_FIELDS} }} \
           c: article(id: \"3\") {{ {ARTICLE_FIELDS} }} \
           d: article(id: \"4\") {{ {ARTICLE_FIELDS} }} }}"
    );
    let cost = cost_of(&app, &query, None).await;
    let trips = cost.round_trips;
    assert_eq!(cost.calls("hmget"), 4);
    assert_eq!(trips, 1, "four articles by id took {trips} round trips");
}

#[tokio::test]
async fn a_score_page_takes_its_scores_from_the_range_read() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    for i in 0..5 {
        app.post(&token, &format!("scored {i}"), &[]).await;
    }
    let mut redis = app.redis.conn().await;
    let page = |order: &'static str| {
        app.gql_ok(
            "query($o: ArticleOrder!) { articles(order: $o) { id score myVote } }",
            json!({ "o": order }),
            Some(&token),
        )
    };
    app.wait_for_derivations().await;
    let before = command_calls(&mut redis, "zscore").await;
    let data = page("SCORE").await;
    assert_eq!(
        command_calls(&mut redis, "zscore").await,
        before,
        "no ZSCORE"
    );
    // The scores are the ranking's, as ZSCORE would have read them.
    for article in data["articles"].as_array().unwrap() {
        let member = format!("article:{}", article["id"].as_str().unwrap());
        let score: f64 = redis::cmd("ZSCORE")
            .arg("score:")
            .arg(&member)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(article["score"].as_f64().unwrap(), score);
        assert_eq!(article["myVote"], "UP");
    }
    // A page by time still reads each score (5 articles, 5 ZSCOREs).
    app.wait_for_derivations().await;
    let before = command_calls(&mut redis, "zscore").await;
    page("NEWEST").await;
    assert_eq!(command_calls(&mut redis, "zscore").await, before + 5);
}

#[tokio::test]
async fn an_articles_groups_come_with_its_hash_and_older_articles_get_theirs_derived() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    let first = app.post(&token, "grouped", &["rust", "redis"]).await;
    app.post(&token, "plain", &[]).await;
    let mut redis = app.redis.conn().await;
    let listed: String = redis::cmd("HGET")
        .arg("article:1")
        .arg("groups")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(listed, "redis,rust", "sorted, beside the set");
    let page = || {
        app.gql_ok(
            "{ articles { id groups } }",
            json!({}),
            Some(&token), // logged in: no response cache
        )
    };
    let before = command_calls(&mut redis, "smembers").await;
    let data = page().await;
    assert_eq!(
        command_calls(&mut redis, "smembers").await,
        before,
        "no SMEMBERS"
    );
    let groups = |data: &serde_json::Value, id: &str| {
        data["articles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id)
            .unwrap()["groups"]
            .clone()
    };
    assert_eq!(groups(&data, "1"), json!(["redis", "rust"]));
    assert_eq!(groups(&data, "2"), json!([]));

    // setGroups keeps the field in step with the set.
    app.gql_ok(
        "mutation($id: ID!) { setGroups(articleId: $id, add: [\"go\"], remove: [\"rust\"]) { id } }",
        json!({ "id": first["id"] }),
        Some(&token),
    )
    .await;
    let listed: String = redis::cmd("HGET")
        .arg("article:1")
        .arg("groups")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(listed, "go,redis");
    // (The deriver follows setGroups' own writes too; once it is done, the
    // list below stays deleted until a read finds it missing.)
    app.wait_for_derivations().await;

    // An article whose hash has no list (written before it was kept, or by
    // another client) costs the page nothing more: it reads as in no group
    // and is derived at once, its list back within a second.
    let () = redis::cmd("HDEL")
        .arg("article:1")
        .arg("groups")
        .query_async(&mut redis)
        .await
        .unwrap();
    let data = page().await;
    assert_eq!(groups(&data, "1"), json!([]));
    eventually(
        "the list derived again",
        Duration::from_secs(1),
        async || {
            let data = page().await;
            let seen = groups(&data, "1");
            (seen == json!(["go", "redis"])).then_some(()).ok_or(seen)
        },
    )
    .await;
}

#[tokio::test]
async fn concurrent_misses_of_one_page_run_it_once() {
    let app = spawn_app().await;
    posted_by_alice(&app, 5).await;
    app.wait_for_derivations().await;
    let mut admin = app.redis.conn().await;
    let before = command_calls(&mut admin, "zrevrange").await;
    // Redis holds every command for a moment, so all 32 requests miss the
    // cache while the first one is still computing the page.
    pause_redis(&mut admin, 300).await;
    let query = "{ articles(pageSize: 7) { id title votes } }";
    let requests = (0..32).map(|_| app.gql(query, json!({}), None));
    let bodies = futures_util::future::join_all(requests).await;
    for body in &bodies {
        assert_eq!(
            body["data"]["articles"].as_array().unwrap().len(),
            5,
            "{body}"
        );
        assert_eq!(body, &bodies[0]);
    }
    let after = command_calls(&mut admin, "zrevrange").await;
    assert_eq!(
        after - before,
        1,
        "one computation for 32 concurrent misses"
    );
}

#[tokio::test]
async fn a_logged_in_page_costs_at_most_30_redis_commands() {
    let app = spawn_app().await;
    posted_by_alice(&app, 30).await;
    let bob = app.sign_up("bob").await;
    for (id, direction) in [("30", "UP"), ("29", "DOWN"), ("10", "UP")] {
        app.vote_as(&bob, id, direction).await;
    }
    // carol's upvote keeps bob's downvoted article on the first page.
    let carol = app.sign_up("carol").await;
    app.vote_as(&carol, "29", "UP").await;
    let mut conn = app.redis.conn().await;

    let query = format!(
        "{{ articles(order: SCORE, page: 1, pageSize: 25) {{ {ARTICLE_FIELDS} downvotes slug views myVote }} }}"
    );
    // Another page loads the script that reads a reader's session and
    // votes, as any server's first logged-in page does once.
    let other = "{ articles(order: NEWEST, pageSize: 1) { id myVote } }";
    app.gql_ok(other, json!({}), Some(&bob)).await;
    app.wait_for_derivations().await;
    reset_command_stats(&mut conn).await;
    // The first logged-in read of a page computes it (its template, see
    // `templates.rs`, where the next readers' cost is counted).
    let page = app.gql_ok(&query, json!({}), Some(&bob)).await;
    let counted = command_stats(&mut conn).await;
    let total: u64 = counted.values().sum();
    assert!(
        total <= 30,
        "a logged-in page ran {total} commands: {counted:?}"
    );
    assert_eq!(counted.get("zmscore"), Some(&1), "{counted:?}");
    assert_eq!(counted.get("sismember"), None, "{counted:?}");

    let articles: &Vec<Value> = page["articles"].as_array().unwrap();
    assert_eq!(articles.len(), 25);
    let vote_of = |id: &str| {
        articles
            .iter()
            .find(|a| a["id"] == id)
            .map(|a| a["myVote"].as_str().unwrap())
    };
    assert_eq!(vote_of("30"), Some("UP"));
    assert_eq!(vote_of("29"), Some("DOWN"));
    assert_eq!(vote_of("28"), Some("NONE"));
    assert_eq!(vote_of("10"), Some("UP"));
}

#[tokio::test]
async fn a_logged_in_page_reads_its_votes_in_the_article_pipeline() {
    let app = spawn_app().await;
    posted_by_alice(&app, 30).await;
    let bob = app.sign_up("bob").await;
    app.vote_as(&bob, "30", "DOWN").await;
    app.vote_as(&bob, "29", "UP").await;
    let query =
        format!("{{ articles(order: NEWEST) {{ {ARTICLE_FIELDS} downvotes myVote slug views }} }}");
    // The vote states ride in the article pipeline: one session lookup, the
    // range, and one pipeline with the hashes and one ZMSCORE of the
    // caller's vote index for the whole page.
    let cost = cost_of(&app, &query, Some(&bob)).await;
    assert_eq!((cost.calls("sismember"), cost.calls("zmscore")), (0, 1));
    let trips = cost.round_trips;
    assert!(
        trips <= 3,
        "a logged-in page with myVote took {trips} round trips"
    );
}

#[tokio::test]
async fn a_reader_served_from_a_shared_template_costs_a_session_and_one_zmscore() {
    let app = spawn_app().await;
    posted_by_alice(&app, 30).await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    app.vote_as(&carol, "28", "DOWN").await;
    let page = "{ articles(order: SCORE, page: 1, pageSize: 25) { id title votes score myVote } }";
    app.gql_ok(page, json!({}), Some(&bob)).await;
    let mut conn = app.redis.conn().await;
    app.wait_for_derivations().await;
    reset_command_stats(&mut conn).await;
    let carols = app.gql_ok(page, json!({}), Some(&carol)).await;
    let counted = command_stats(&mut conn).await;
    // One script reads her session, her account's role and ban, and her
    // votes on the page.
    let expected = [("evalsha", 1), ("get", 1), ("hmget", 1), ("zmscore", 1)];
    assert_eq!(
        counted,
        HashMap::from(expected.map(|(c, n)| (c.to_owned(), n))),
        "carol's page ran {counted:?}"
    );
    assert_eq!(carols["articles"].as_array().unwrap().len(), 25);
}

/// A template with more holes than one step of the index read takes is
/// filled in parts by the same script, each hole with its vote.
#[tokio::test]
async fn a_template_of_over_a_thousand_votes_is_filled_by_one_script() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let mut ids = Vec::new();
    for n in 0..40 {
        let article = app.post(&alice, &format!("story {n}"), &[]).await;
        ids.push(article["id"].as_str().unwrap().to_owned());
    }
    app.vote_as(&bob, &ids[0], "UP").await;
    app.vote_as(&bob, &ids[39], "DOWN").await;
    let query = "{ articles(order: NEWEST, pageSize: 40) { poster { articles(order: NEWEST, pageSize: 40) { id myVote } } } }";
    app.gql_ok(query, json!({}), Some(&bob)).await;
    let mut conn = app.redis.conn().await;
    app.wait_for_derivations().await;
    reset_command_stats(&mut conn).await;
    let data = app.gql_ok(query, json!({}), Some(&bob)).await;
    let counted = command_stats(&mut conn).await;
    let expected = [("evalsha", 1), ("get", 1), ("hmget", 1), ("zmscore", 2)];
    let expected = HashMap::from(expected.map(|(c, n)| (c.to_owned(), n)));
    assert_eq!(counted, expected, "the filled page ran {counted:?}");
    let shown: Vec<(String, String)> = data["articles"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["poster"]["articles"].as_array().unwrap().clone())
        .map(|a| {
            (
                a["id"].as_str().unwrap().into(),
                a["myVote"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(shown.len(), 1_600);
    let cast = [(&ids[0], "UP"), (&ids[39], "DOWN")];
    for (id, vote) in shown {
        let expected = cast.iter().find(|(i, _)| **i == id).map_or("NONE", |c| c.1);
        assert_eq!(vote, expected, "article {id}");
    }
}

/// A subscription that cannot depend on its caller runs once per event
/// for all its subscribers: one article read per vote.
#[tokio::test]
async fn a_shared_subscription_reads_the_article_once_per_event() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "shared title", &[]).await;
    let mut voters = Vec::new();
    for i in 0..4 {
        voters.push(app.sign_up(&format!("voter{i}")).await);
    }
    let mut redis = app.redis.conn().await;
    // What a vote itself costs in HMGETs (its derivation's included), with
    // nobody listening.
    app.wait_for_derivations().await;
    let before = command_calls(&mut redis, "hmget").await;
    app.vote_as(&voters[0], "1", "UP").await;
    app.wait_for_derivations().await;
    let per_vote = command_calls(&mut redis, "hmget").await - before;

    let query = "subscription { scoreChanged { votes article { title } } }";
    let mut clients = Vec::new();
    for _ in 0..5 {
        let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
        client.subscribe("s", query, json!({})).await;
        clients.push(client);
    }
    eventually(
        "one shared stream of 5",
        Duration::from_secs(5),
        async || {
            let h = app.health().await;
            done_if(h["sharedSubscriptions"]["subscribers"] == 5, h)
        },
    )
    .await;
    let before = command_calls(&mut redis, "hmget").await;
    for voter in &voters[1..] {
        app.vote_as(voter, "1", "UP").await;
        for client in &mut clients {
            let event = client.next_event().await["scoreChanged"].clone();
            assert_eq!(event["article"]["title"], "shared title", "{event}");
        }
        app.wait_for_derivations().await;
    }
    assert_eq!(
        command_calls(&mut redis, "hmget").await - before,
        3 * (per_vote + 1),
        "one article read per vote for all 5 subscribers"
    );
}

#[tokio::test]
async fn a_page_of_nodes_is_one_batch_per_loader() {
    let app = seeded_app().await;
    let mut ids: Vec<String> = (1..=25).map(|i| format!("\"{i}\"")).collect();
    ids.extend(["\"user:alice\"", "\"group:even\"", "\"nonsense\""].map(str::to_owned));
    let query = format!(
        "{{ nodes(ids: [{}]) {{ id ... on Article {{ {ARTICLE_FIELDS} }} }} }}",
        ids.join(", ")
    );
    let cost = cost_of(&app, &query, None).await;
    let trips = cost.round_trips;
    assert_eq!(cost.calls("hmget"), 25, "every article was read once");
    assert_eq!(cost.calls("exists"), 1, "the user was looked up once");
    // The articles' batch and the users' run side by side.
    assert!(trips <= 2, "a page of nodes took {trips} round trips");
}

/// The Redis requests (pipelines and lone commands) the server at
/// `address` has sent, as its `/metrics` counts them.
async fn redis_requests(client: &reqwest::Client, address: &str) -> u64 {
    let text = metrics_text(client, address).await;
    let counts = ["pipeline", "command"].map(|kind| {
        let series = format!("votegraph_redis_command_duration_seconds_count{{kind=\"{kind}\"}} ");
        let line = text.lines().find_map(|l| l.strip_prefix(series.as_str()));
        line.and_then(|n| n.parse::<f64>().ok()).unwrap_or(0.0)
    });
    counts.iter().sum::<f64>() as u64
}

/// The fewest Redis requests one run of `query` made, over enough runs
/// that one falls between the outboxes' drains (one a second per shard)
/// on a loaded machine too, once warm.
async fn requests_of(client: &reqwest::Client, address: &str, query: &str) -> u64 {
    let run = async || {
        let body = gql_at(client, address, query, json!({}), None, None).await;
        assert!(body.get("errors").is_none(), "{body}");
    };
    run().await;
    run().await;
    let mut fewest = u64::MAX;
    for _ in 0..20 {
        let before = redis_requests(client, address).await;
        run().await;
        fewest = fewest.min(redis_requests(client, address).await - before);
    }
    fewest
}

/// On 3 primaries, each holding several shards, a computed page reads a
/// node's slices, and then its articles, in one pipeline per node: one
/// request per shard would be twice as many.
#[tokio::test]
async fn a_cluster_page_sends_each_node_one_pipeline_per_round_trip() {
    let cluster = TestCluster::start(3, 0).await;
    let mut settings = test_settings_for("redis://unused");
    settings.redis_url = None;
    settings.redis_cluster_nodes = Some(cluster.seeds());
    settings.no_response_cache = true;
    let server = spawn_server(settings).await;
    let (client, address) = (reqwest::Client::new(), server.address.as_str());
    let alice = sign_up_at(&client, address, "alice").await;
    let post = "mutation($t: String!, $l: String!, $g: [String!]!) { post(title: $t, link: $l, groups: $g) { id } }";
    for i in 0..30 {
        let groups = if i % 2 == 0 {
            json!(["even"])
        } else {
            json!([])
        };
        let vars = json!({ "t": format!("article {i}"), "l": format!("https://example.com/{i}"), "g": groups });
        let body = gql_at(&client, address, post, vars, Some(&alice), None).await;
        assert!(body.get("errors").is_none(), "{body}");
    }
    let nodes = cluster.primaries().await.len() as u64;
    // Each reads its ranking's slices, then its articles: two round trips.
    let pages = [
        (
            "front page",
            "{ articles(pageSize: 25) { id title votes } }",
        ),
        (
            "group page",
            "{ group(name: \"even\") { articles(pageSize: 10) { id title } } }",
        ),
        (
            "feed page",
            "{ feed(first: 10) { edges { node { id title } } } }",
        ),
    ];
    for (page, query) in pages {
        let requests = requests_of(&client, address, query).await;
        assert!(
            (2..=nodes * 2).contains(&requests),
            "a {page} sent {requests} requests to {nodes} nodes in two round trips"
        );
    }
}
