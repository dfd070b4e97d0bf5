//! Writes whose answer was lost: through Redis stalls longer than
//! `--redis-timeout-ms` and killed connections, every answer is compared
//! with what Redis holds. An error other than `OUTCOME_UNKNOWN` wrote
//! nothing, an acknowledged write is kept, and a client retrying every
//! `OUTCOME_UNKNOWN` makes no duplicate. Each mutation sent again after
//! it was applied changes nothing more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

use crate::helpers::{
    done_if, error_code, eventually, spawn_app_with, TestApp, WsClient, ARTICLE_FIELDS,
    TRANSPORT_WS, VOTE_AS,
};

const VOTERS: usize = 24;
const VOTED_ARTICLES: usize = 5;
const VOTES_EACH: usize = 15;
const POSTERS: usize = 4;
const POSTS_EACH: usize = 10;
const GROUPED_ARTICLES: usize = 6;
/// Group changes per grouped article: each adds one new group, up to the
/// most an article may be in.
const CHANGES_EACH: usize = 10;

const POST: &str = "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id votes } }";
const ADD_GROUP: &str =
    "mutation($id: ID!, $g: String!) { setGroups(articleId: $id, add: [$g]) { id } }";
const DIRECTIONS: [&str; 3] = ["UP", "DOWN", "NONE"];

/// What one attempt of a mutation was answered.
#[derive(Debug, Clone)]
enum Answer {
    Done(Value),
    Unknown,
    Refused(String),
}

fn answer_of(body: &Value, field: &str) -> Answer {
    match body["errors"][0]["extensions"]["code"].as_str() {
        None => Answer::Done(body["data"][field].clone()),
        Some("OUTCOME_UNKNOWN") => {
            let message = body["errors"][0]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("may have been applied") && message.contains("retrying"),
                "{body}"
            );
            Answer::Unknown
        }
        Some(code) => Answer::Refused(code.to_owned()),
    }
}

/// A client that retries every `OUTCOME_UNKNOWN`.
struct Client<'a> {
    app: &'a TestApp,
    unknown: &'a AtomicUsize,
    refused: &'a AtomicUsize,
}

impl Client<'_> {
    /// Sends a mutation until its outcome is known: done, or refused with
    /// no earlier attempt of unknown outcome (a refusal after one says
    /// nothing of the first).
    async fn send(&self, query: &str, variables: Value, token: &str, field: &str) -> Answer {
        let mut unknown = false;
        for _ in 0..500 {
            let body = self.app.gql(query, variables.clone(), Some(token)).await;
            match answer_of(&body, field) {
                Answer::Unknown => {
                    self.unknown.fetch_add(1, Ordering::Relaxed);
                    unknown = true;
                }
                Answer::Refused(_) if unknown => {}
                Answer::Refused(code) => {
                    assert_eq!(code, "INTERNAL", "{body}");
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return Answer::Refused(code);
                }
                done => return done,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{query} never got a known outcome");
    }
}

/// `CLIENT PAUSE ms mode` (`ALL`, or `WRITE`: reads such as the session's
/// lookup go on, writes wait).
async fn pause(conn: &mut MultiplexedConnection, ms: u64, mode: &str) {
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg(mode)
        .query_async(conn)
        .await
        .unwrap();
}

/// Stalls Redis past the server's timeout, then kills its connections,
/// until `done`.
async fn chaos(conn: &mut MultiplexedConnection, done: &AtomicBool) {
    let kill = || {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .clone()
    };
    for mode in ["ALL", "WRITE"].iter().cycle() {
        if done.load(Ordering::Relaxed) {
            return;
        }
        pause(conn, 300, mode).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let _: i64 = kill().query_async(conn).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn id_of(article: &Value) -> String {
    article["id"].as_str().expect("an id").to_owned()
}

async fn hget<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    key: &str,
    field: &str,
) -> T {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(conn)
        .await
        .unwrap()
}

async fn scard(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("SCARD")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

async fn is_member(conn: &mut MultiplexedConnection, key: &str, member: &str) -> bool {
    redis::cmd("SISMEMBER")
        .arg(key)
        .arg(member)
        .query_async(conn)
        .await
        .unwrap()
}

/// Every article in Redis as (poster, link) → its ids.
async fn articles_by_link(
    conn: &mut MultiplexedConnection,
) -> HashMap<(String, String), Vec<String>> {
    let last: u64 = redis::cmd("GET")
        .arg("article:")
        .query_async(conn)
        .await
        .unwrap();
    let mut found: HashMap<_, Vec<_>> = HashMap::new();
    for id in 1..=last {
        let key = format!("article:{id}");
        let poster: Option<String> = hget(conn, &key, "poster").await;
        let link: Option<String> = hget(conn, &key, "link").await;
        if let (Some(poster), Some(link)) = (poster, link) {
            found
                .entry((poster, link))
                .or_default()
                .push(id.to_string());
        }
    }
    found
}

/// One voter's votes: each article in turn, the direction cycling, so
/// most votes change something. Answers (article, direction) → whether
/// it was acknowledged.
async fn cast_votes(
    client: &Client<'_>,
    token: &str,
    voter: usize,
    ids: &[String],
) -> Vec<(String, &'static str, bool)> {
    let mut cast = Vec::new();
    for n in 0..VOTES_EACH {
        let id = &ids[(voter + n) % ids.len()];
        let direction = DIRECTIONS[(voter + n / ids.len()) % DIRECTIONS.len()];
        let answer = client
            .send(VOTE_AS, json!({ "id": id, "d": direction }), token, "vote")
            .await;
        cast.push((id.clone(), direction, matches!(answer, Answer::Done(_))));
    }
    cast
}

/// One poster's posts, each of its own link: (link, the id answered).
async fn post_links(
    client: &Client<'_>,
    token: &str,
    poster: usize,
) -> Vec<(String, Option<Value>)> {
    let mut posted = Vec::new();
    for n in 0..POSTS_EACH {
        let link = format!("https://example.com/{poster}/{n}");
        let variables = json!({ "t": format!("post {n} of {poster}"), "l": link });
        let answer = client.send(POST, variables, token, "post").await;
        posted.push((
            link,
            match answer {
                Answer::Done(article) => Some(article),
                _ => None,
            },
        ));
    }
    posted
}

/// Adds a new group to one article, again and again: (group, whether it
/// was acknowledged).
async fn add_groups(client: &Client<'_>, token: &str, id: &str) -> Vec<(String, bool)> {
    let mut changes = Vec::new();
    for n in 0..CHANGES_EACH {
        let group = format!("a{id}-{n}");
        let variables = json!({ "id": id, "g": group });
        let answer = client.send(ADD_GROUP, variables, token, "setGroups").await;
        changes.push((group, matches!(answer, Answer::Done(_))));
    }
    changes
}

#[tokio::test]
async fn writes_through_stalls_and_killed_connections_match_their_answers() {
    let app = spawn_app_with(|s| {
        s.redis_timeout_ms = 150;
        s.post_dedupe_secs = 86_400;
    })
    .await;
    let author = app.sign_up("author").await;
    let mut voted = Vec::new();
    for n in 0..VOTED_ARTICLES {
        voted.push(id_of(&app.post(&author, &format!("voted {n}"), &[]).await));
    }
    let mut grouped = Vec::new();
    for n in 0..GROUPED_ARTICLES {
        grouped.push(id_of(
            &app.post(&author, &format!("grouped {n}"), &[]).await,
        ));
    }
    let mut voters = Vec::new();
    for n in 0..VOTERS {
        voters.push(app.sign_up(&format!("voter{n}")).await);
    }
    let mut posters = Vec::new();
    for n in 0..POSTERS {
        posters.push(app.sign_up(&format!("poster{n}")).await);
    }

    let (unknown, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let client = Client {
        app: &app,
        unknown: &unknown,
        refused: &refused,
    };
    let done = AtomicBool::new(false);
    let mut admin = app.redis.conn().await;
    let work = async {
        let votes = join_all(
            voters
                .iter()
                .enumerate()
                .map(|(n, t)| cast_votes(&client, t, n, &voted)),
        );
        let posts = join_all(
            posters
                .iter()
                .enumerate()
                .map(|(n, t)| post_links(&client, t, n)),
        );
        let groups = join_all(grouped.iter().map(|id| add_groups(&client, &author, id)));
        let all = futures_util::join!(votes, posts, groups);
        done.store(true, Ordering::Relaxed);
        all
    };
    let ((votes, posts, groups), ()) = futures_util::join!(work, chaos(&mut admin, &done));
    let mut conn = app.redis.conn().await;

    // Votes: each voter's last known vote on each article is what Redis
    // holds (an acknowledged one kept, a refused one never applied), and
    // every article's counts match its voted sets.
    for (n, cast) in votes.iter().enumerate() {
        let voter = format!("user:voter{n}");
        let mut expected: HashMap<&str, &str> = HashMap::new();
        for (id, direction, acknowledged) in cast {
            if *acknowledged {
                expected.insert(id, direction);
            }
        }
        for id in &voted {
            let up = is_member(&mut conn, &format!("voted:{id}"), &voter).await;
            let down = is_member(&mut conn, &format!("downvoted:{id}"), &voter).await;
            let held = match (up, down) {
                (true, false) => "UP",
                (false, true) => "DOWN",
                (false, false) => "NONE",
                _ => panic!("{voter} both up and down on {id}"),
            };
            let wanted = expected.get(id.as_str()).copied().unwrap_or("NONE");
            assert_eq!(held, wanted, "{voter} on article {id}: {cast:?}");
        }
    }
    for id in &voted {
        let key = format!("article:{id}");
        let ups: i64 = hget(&mut conn, &key, "votes").await;
        let downs: i64 = hget(&mut conn, &key, "downvotes").await;
        assert_eq!(ups, scard(&mut conn, &format!("voted:{id}")).await, "{id}");
        assert_eq!(
            downs,
            scard(&mut conn, &format!("downvoted:{id}")).await,
            "{id}"
        );
    }

    // Posts: one article per acknowledged post, with the id it was
    // answered and the poster's upvote alone; none for a refused one.
    let articles = articles_by_link(&mut conn).await;
    for (n, posted) in posts.iter().enumerate() {
        let poster = format!("user:poster{n}");
        for (link, answered) in posted {
            let found = articles
                .get(&(poster.clone(), link.clone()))
                .cloned()
                .unwrap_or_default();
            match answered {
                Some(article) => {
                    assert_eq!(found, [id_of(article)], "{poster} posted {link}");
                    assert_eq!(article["votes"], 1, "{article}");
                    let ups: i64 = hget(&mut conn, &format!("article:{}", found[0]), "votes").await;
                    assert_eq!(ups, 1, "{poster} posted {link}");
                }
                None => assert!(
                    found.is_empty(),
                    "{poster}'s refused post of {link}: {found:?}"
                ),
            }
        }
    }

    // Group changes: an acknowledged one is there, a refused one is not.
    for (id, changes) in grouped.iter().zip(&groups) {
        for (group, acknowledged) in changes {
            let member = is_member(
                &mut conn,
                &format!("group:{group}"),
                &format!("article:{id}"),
            )
            .await;
            assert_eq!(member, *acknowledged, "group {group} of article {id}");
        }
    }
    let (unknown, refused) = (unknown.into_inner(), refused.into_inner());
    eprintln!("{unknown} answers OUTCOME_UNKNOWN, {refused} writes refused");
    assert!(
        unknown > 0,
        "the stalls never left a write's outcome unknown"
    );
}

#[tokio::test]
async fn a_write_over_a_websocket_whose_answer_is_lost_says_so() {
    let app = spawn_app_with(|s| s.redis_timeout_ms = 500).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let id = id_of(&app.post(&alice, "voted over a socket", &[]).await);
    let auth = json!({ "Authorization": format!("Bearer {bob}") });
    let mut ws = WsClient::connect_to(&app.address, TRANSPORT_WS, auth).await;
    let mut vote = async |n: usize| {
        let op = n.to_string();
        ws.subscribe(&op, VOTE_AS, json!({ "id": id, "d": "UP" }))
            .await;
        let mut message = ws.next_raw().await;
        while message["id"] != op.as_str() || message["type"] == "complete" {
            message = ws.next_raw().await;
        }
        message["payload"].clone()
    };

    // Stalled past the timeout once sent, a vote says OUTCOME_UNKNOWN. One
    // refused before it was sent (no connection free in time) says
    // INTERNAL and wrote nothing: then stall again.
    let votes = format!("{{ article(id: \"{id}\") {{ votes }} }}");
    let mut admin = app.redis.conn().await;
    let mut n = 1;
    loop {
        pause(&mut admin, 2_000, "WRITE").await;
        let answer = vote(n).await;
        let code = answer["errors"][0]["extensions"]["code"].clone();
        if code == "OUTCOME_UNKNOWN" {
            break;
        }
        assert_eq!(code, "INTERNAL", "{answer}");
        let () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query_async(&mut admin)
            .await
            .unwrap();
        let data = app.gql_ok(&votes, json!({}), None).await;
        assert_eq!(
            data["article"]["votes"], 1,
            "a vote answered INTERNAL was applied"
        );
        assert!(n < 5, "no vote was sent during a stall: {answer}");
        n += 1;
    }

    // Sent again until it is answered, and once more: one vote.
    n += 1;
    while vote(n).await["data"]["vote"]["id"] != id.as_str() {
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(vote(n + 1).await["data"]["vote"]["id"], id.as_str());
    let data = app.gql_ok(&votes, json!({}), None).await;
    assert_eq!(data["article"]["votes"], 2);
}

#[tokio::test]
async fn a_log_out_whose_answer_is_lost_says_so() {
    let app = spawn_app_with(|s| s.redis_timeout_ms = 150).await;
    let alice = app.sign_up("alice").await;
    let mut admin = app.redis.conn().await;
    pause(&mut admin, 1_000, "WRITE").await;
    let log_out = "mutation { logOut }";
    let body = app.gql(log_out, json!({}), Some(&alice)).await;
    assert_eq!(error_code(&body), "OUTCOME_UNKNOWN", "{body}");

    // Sent again until answered: the session is gone either way.
    eventually(
        "logOut to be answered",
        Duration::from_secs(5),
        async || {
            let body = app.gql(log_out, json!({}), Some(&alice)).await;
            done_if(body["errors"].is_null(), body)
        },
    )
    .await;
    let me = app.gql_ok("{ me { name } }", json!({}), Some(&alice)).await;
    assert_eq!(me["me"], Value::Null);
}

#[tokio::test]
async fn a_mutation_past_the_deadline_may_have_been_applied() {
    let app = spawn_app_with(|s| {
        s.redis_timeout_ms = 5_000;
        s.request_timeout_ms = 200;
    })
    .await;
    let alice = app.sign_up("alice").await;
    let id = id_of(&app.post(&alice, "viewed", &[]).await);
    let view = "mutation($id: ID!) { viewArticle(id: $id) { views } }";
    let data = app.gql_ok(view, json!({ "id": id }), Some(&alice)).await;
    assert_eq!(data["viewArticle"]["views"], 1);
    let mut admin = app.redis.conn().await;
    pause(&mut admin, 1_000, "WRITE").await;
    let body = app.gql(view, json!({ "id": id }), None).await;
    assert_eq!(error_code(&body), "OUTCOME_UNKNOWN", "{body}");

    // It ran once Redis went on; sent again, it counts nothing more.
    let views = async || {
        let article = format!("{{ article(id: \"{id}\") {{ views }} }}");
        // Reads wait behind the stalled write until Redis goes on.
        app.gql(&article, json!({}), None).await["data"]["article"]["views"].clone()
    };
    eventually("the view to run", Duration::from_secs(5), async || {
        let seen = views().await;
        done_if(seen == 2, seen)
    })
    .await;
    let data = app.gql_ok(view, json!({ "id": id }), None).await;
    assert_eq!(data["viewArticle"]["views"], 2);
}

#[tokio::test]
async fn every_mutation_sent_again_after_it_was_applied_changes_nothing_more() {
    let app = spawn_app_with(|s| {
        s.post_dedupe_secs = 86_400;
        s.rate_post = "2/3600".parse().unwrap();
        s.rate_rename_slug = "1/3600".parse().unwrap();
    })
    .await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let post = |link: &str| json!({ "t": "a title", "l": link });
    let first = app
        .gql_ok(POST, post("https://example.com/b"), Some(&alice))
        .await["post"]
        .clone();
    let id = id_of(&first);
    let twice = async |query: &str, variables: Value, token: Option<&str>| {
        let once = app.gql_ok(query, variables.clone(), token).await;
        assert_eq!(app.gql_ok(query, variables, token).await, once, "{query}");
        once
    };

    // post: the same link, however written, answers the first article,
    // unchanged and not counted; another poster's is a new article.
    for link in ["https://example.com/b", "HTTPS://Example.COM:443/a/../b"] {
        let again = app.gql_ok(POST, post(link), Some(&alice)).await["post"].clone();
        assert_eq!(again, first, "{link}");
    }
    let bobs = app
        .gql_ok(POST, post("https://example.com/b"), Some(&bob))
        .await;
    assert_ne!(id_of(&bobs["post"]), id);
    app.gql_ok(POST, post("https://example.com/c"), Some(&alice))
        .await;
    let third = app
        .gql(POST, post("https://example.com/d"), Some(&alice))
        .await;
    assert_eq!(error_code(&third), "RATE_LIMITED", "{third}");
    let count = app.gql_ok("{ articleCount }", json!({}), None).await;
    assert_eq!(count["articleCount"], 3);

    // vote, setGroups, renameSlug (not counted again), viewArticle.
    let article = format!("{{ {ARTICLE_FIELDS} slug views }}");
    let vote = format!("mutation($id: ID!) {{ vote(articleId: $id, direction: DOWN) {article} }}");
    twice(&vote, json!({ "id": id }), Some(&bob)).await;
    let groups = format!(
        "mutation($id: ID!) {{ setGroups(articleId: $id, add: [\"x\"], remove: [\"y\"]) {article} }}"
    );
    twice(&groups, json!({ "id": id }), Some(&alice)).await;
    let rename =
        format!("mutation($id: ID!) {{ renameSlug(articleId: $id, slug: \"new\") {article} }}");
    let renamed = twice(&rename, json!({ "id": id }), Some(&alice)).await;
    assert_eq!(renamed["renameSlug"]["slug"], "new");
    let view = format!("mutation($id: ID!) {{ viewArticle(id: $id) {article} }}");
    let viewed = twice(&view, json!({ "id": id }), Some(&bob)).await;
    assert_eq!(viewed["viewArticle"]["views"], 1);
    let votes = &viewed["viewArticle"];
    assert_eq!(
        (&votes["votes"], &votes["groups"]),
        (&json!(1), &json!(["x"]))
    );

    // logOut: the second finds no session to revoke.
    let out = app
        .gql_ok("mutation { logOut }", json!({}), Some(&bob))
        .await;
    assert_eq!(out["logOut"], true);
    let again = app
        .gql_ok("mutation { logOut }", json!({}), Some(&bob))
        .await;
    assert_eq!(again["logOut"], false);

    // signUp: the name is taken, and logIn with the same password says
    // the account is this client's.
    let sign_up = "mutation { signUp(name: \"alice\", password: \"password-of-alice\") { token } }";
    assert_eq!(
        error_code(&app.gql(sign_up, json!({}), None).await),
        "BAD_USER_INPUT"
    );
    let log_in = "mutation { logIn(name: \"alice\", password: \"password-of-alice\") { token } }";
    app.gql_ok(log_in, json!({}), None).await;
}

#[tokio::test]
async fn with_dedupe_off_a_repost_is_a_new_article() {
    let app = spawn_app_with(|s| s.post_dedupe_secs = 0).await;
    let alice = app.sign_up("alice").await;
    let first = id_of(&app.post(&alice, "same", &[]).await);
    assert_ne!(id_of(&app.post(&alice, "same", &[]).await), first);
}
