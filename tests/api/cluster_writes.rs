//! What a write promises on a Redis Cluster, as on one primary, with two
//! server instances on a 3-primary cluster: the last admin's guard holds
//! however admins on different shards race, and a write, once it answers,
//! shows to its writer on every instance.

use serde_json::{json, Value};

use crate::helpers::{
    gql_at, set_role_on_cluster, sign_up_at, spawn_server, test_settings_for, Instance, TestCluster,
};

/// A server in cluster mode on `cluster`, with the test settings.
async fn serve(cluster: &TestCluster) -> Instance {
    let mut settings = test_settings_for("redis://unused");
    settings.redis_url = None;
    settings.redis_cluster_nodes = Some(cluster.seeds());
    spawn_server(settings).await
}

/// Signs up `prefix0`, `prefix1`… until one's account is on another
/// primary than every one of `avoid`; answers its name, token and primary.
async fn sign_up_away(
    cluster: &TestCluster,
    address: &str,
    prefix: &str,
    avoid: &[u16],
) -> (String, String, u16) {
    let client = reqwest::Client::new();
    for n in 0..50 {
        let name = format!("{prefix}{n}");
        let token = sign_up_at(&client, address, &name).await;
        let home = cluster.holder(&format!("user:{name}")).await;
        if !avoid.contains(&home) {
            return (name, token, home);
        }
    }
    panic!("no name of {prefix}… landed away from {avoid:?}")
}

async fn gql(address: &str, query: &str, variables: Value, token: Option<&str>) -> Value {
    gql_at(
        &reqwest::Client::new(),
        address,
        query,
        variables,
        token,
        None,
    )
    .await
}

/// `name`'s role, as any reader sees it.
async fn role(address: &str, name: &str) -> String {
    let query = "query($id: ID!) { node(id: $id) { ... on User { role } } }";
    let body = gql(
        address,
        query,
        json!({ "id": format!("user:{name}") }),
        None,
    )
    .await;
    body["data"]["node"]["role"]
        .as_str()
        .unwrap_or_else(|| panic!("no role: {body}"))
        .to_owned()
}

/// Two admins whose accounts are on different primaries demote each
/// other at the same moment, each through another instance: one may
/// pass, never both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_on_two_shards_demoting_each_other_leave_one() {
    let cluster = TestCluster::start(3, 0).await;
    let (a, b) = (serve(&cluster).await, serve(&cluster).await);
    let (ann, ann_token, home) = sign_up_away(&cluster, &a.address, "ann", &[]).await;
    let (bob, bob_token, _) = sign_up_away(&cluster, &a.address, "bob", &[home]).await;
    let seeds = cluster.seeds();
    let demote = "mutation($n: String!) { setRole(name: $n, role: MEMBER) { role } }";
    for round in 0..20 {
        for name in [&ann, &bob] {
            let made = set_role_on_cluster(&seeds, name, "admin");
            assert!(made.status.success(), "{made:?}");
        }
        let (by_ann, by_bob) = tokio::join!(
            gql(&a.address, demote, json!({ "n": bob }), Some(&ann_token)),
            gql(&b.address, demote, json!({ "n": ann }), Some(&bob_token)),
        );
        let mut passed = 0;
        for body in [&by_ann, &by_bob] {
            match body["errors"][0]["extensions"]["code"].as_str() {
                None => passed += 1,
                // The guard's refusal, or the other's demotion came first.
                Some("FORBIDDEN" | "SERVICE_UNAVAILABLE") => {}
                Some(code) => panic!("round {round}: {code}: {body}"),
            }
        }
        let roles = [role(&b.address, &ann).await, role(&a.address, &bob).await];
        assert!(
            roles.iter().any(|r| r == "ADMIN"),
            "round {round}: no admin left: {roles:?}; {by_ann} {by_bob}"
        );
        assert_eq!(passed, 1, "round {round}: {by_ann} {by_bob}");
    }
}

const DIRECTIONS: [&str; 3] = ["UP", "DOWN", "NONE"];

/// The caller's vote on article `id`, through `address`: as the front
/// page shows it and as `article(id:)` does.
async fn my_vote(address: &str, token: &str, id: &str) -> [String; 2] {
    let page = "{ articles(order: NEWEST, pageSize: 50) { id myVote } }";
    let page = gql(address, page, json!({}), Some(token)).await;
    let on_page = page["data"]["articles"]
        .as_array()
        .unwrap_or_else(|| panic!("no page: {page}"))
        .iter()
        .find(|a| a["id"] == id)
        .map_or(Value::Null, |a| a["myVote"].clone());
    let one = "query($id: ID!) { article(id: $id) { myVote } }";
    let one = gql(address, one, json!({ "id": id }), Some(token)).await;
    [on_page, one["data"]["article"]["myVote"].clone()].map(|v| match v {
        Value::String(vote) => vote,
        other => other.to_string(),
    })
}

/// Right after a vote answers, its voter sees it on both instances, on
/// articles whose shard is not the voter's; a post's answer shows its
/// poster's own upvote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_sees_their_vote_on_every_instance_once_it_answers() {
    let cluster = TestCluster::start(3, 0).await;
    let (a, b) = (serve(&cluster).await, serve(&cluster).await);
    let (_, poster, poster_home) = sign_up_away(&cluster, &a.address, "poster", &[]).await;
    let posted = "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id myVote } }";
    let (mut posts, mut poster_elsewhere) = (Vec::new(), 0);
    for n in 0..12 {
        let vars = json!({ "t": format!("story {n}"), "l": format!("https://example.com/{n}") });
        let body = gql(&a.address, posted, vars, Some(&poster)).await;
        assert_eq!(body["data"]["post"]["myVote"], "UP", "{body}");
        let id = body["data"]["post"]["id"].as_str().unwrap().to_owned();
        if cluster.holder(&format!("article:{id}")).await != poster_home {
            poster_elsewhere += 1;
        }
        posts.push(id);
    }
    assert!(
        poster_elsewhere > 0,
        "a post on another shard than its poster"
    );

    let (_, voter, home) = sign_up_away(&cluster, &a.address, "voter", &[]).await;
    let mut elsewhere = Vec::new();
    for id in &posts {
        if cluster.holder(&format!("article:{id}")).await != home {
            elsewhere.push(id.clone());
        }
    }
    assert!(elsewhere.len() >= 2, "{elsewhere:?}");
    let vote =
        "mutation($id: ID!, $d: VoteDirection!) { vote(articleId: $id, direction: $d) { id } }";
    let mut stale = Vec::new();
    for n in 0..30 {
        let id = &elsewhere[n % elsewhere.len()];
        // Each article's votes go UP, DOWN, NONE in turn: each changes it.
        let direction = DIRECTIONS[(n / elsewhere.len()) % 3];
        let body = gql(
            &a.address,
            vote,
            json!({ "id": id, "d": direction }),
            Some(&voter),
        )
        .await;
        assert!(body.get("errors").is_none(), "{body}");
        let (on_a, on_b) = tokio::join!(
            my_vote(&a.address, &voter, id),
            my_vote(&b.address, &voter, id),
        );
        if on_a.iter().chain(&on_b).any(|seen| seen != direction) {
            stale.push(format!("{direction} on {id}: A {on_a:?}, B {on_b:?}"));
        }
    }
    assert!(
        stale.is_empty(),
        "{} of 30 read stale: {stale:#?}",
        stale.len()
    );
}
