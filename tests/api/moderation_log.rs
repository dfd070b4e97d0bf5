//! Flags, the moderators' queue and the moderation log: the threshold
//! hides an article and logs it, every action writes its entry and no
//! refusal writes one, the log pages and filters and keeps exactly the
//! newest `--modlog-max-entries`, and every reader learns from the fields
//! what the log says; and the book's own code, which can
//! bring a removed article back neither itself nor through what votegraph
//! derives from it.

use serde_json::{json, Value};

use crate::helpers::{error_code, eventually, needed, Book, Moderated, Program};

const FLAG: &str = "mutation($id: ID!, $r: String) { flag(articleId: $id, reason: $r) { id } }";
const UNFLAG: &str = "mutation($id: ID!) { unflag(articleId: $id) { id } }";
const SHOWN: &str = "query($id: ID!) { article(id: $id) { status flags } articles { id } }";
const QUEUE: &str = "{ moderationQueue { totalCount edges { node { id flags status } } } }";

async fn flag(m: &Moderated, token: &str, id: &str) -> Value {
    m.app
        .gql(FLAG, json!({ "id": id, "r": "spam" }), Some(token))
        .await
}

/// What `token` sees of article `id`'s moderation.
async fn seen(m: &Moderated, id: &str, token: Option<&str>) -> Value {
    m.app.gql_ok(SHOWN, json!({ "id": id }), token).await["article"].clone()
}

async fn ids_of(m: &Moderated, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let article = m.app.post(&m.alice, &format!("story {i}"), &["news"]).await;
        ids.push(article["id"].as_str().unwrap().to_owned());
    }
    ids
}

#[tokio::test]
async fn flags_fill_the_queue_and_the_threshold_hides_an_article() {
    let m = Moderated::start_with(|s| {
        s.flag_threshold = 3;
        (s.flag_min_account_age_secs, s.flag_min_karma) = (0, 0);
    })
    .await;
    let ids = ids_of(&m, 2).await;
    let (x, y) = (ids[0].as_str(), ids[1].as_str());
    let mut users = Vec::new();
    for name in ["user1", "user2", "user3", "user4"] {
        users.push(m.app.sign_up(name).await);
    }
    flag(&m, &users[0], x).await;
    flag(&m, &users[0], x).await;
    assert_eq!(
        seen(&m, x, Some(&m.moderator)).await,
        json!({ "status": "FLAGGED", "flags": 1 })
    );
    assert_eq!(
        seen(&m, x, Some(&m.alice)).await,
        json!({ "status": "FLAGGED", "flags": null })
    );
    // Flags are not logged: others see a flagged article as visible.
    for reader in [None, Some(users[0].as_str())] {
        assert_eq!(
            seen(&m, x, reader).await,
            json!({ "status": "VISIBLE", "flags": null })
        );
    }
    flag(&m, &users[0], y).await;
    flag(&m, &users[1], y).await;
    let queue = m.app.gql_ok(QUEUE, json!({}), Some(&m.moderator)).await;
    let order: Vec<&Value> = queue["moderationQueue"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["node"]["id"])
        .collect();
    assert_eq!(order, [y, x], "most flags first: {queue}");
    m.app
        .gql_ok(UNFLAG, json!({ "id": y }), Some(&users[1]))
        .await;

    flag(&m, &users[1], x).await;
    flag(&m, &users[2], x).await;
    let front = m.app.gql_ok(SHOWN, json!({ "id": x }), None).await;
    assert!(
        front["article"].is_null() && front["articles"].as_array().unwrap().len() == 1,
        "{front}"
    );
    assert_eq!(error_code(&flag(&m, &users[3], x).await), "NOT_FOUND");
    let queue = m.app.gql_ok(QUEUE, json!({}), Some(&m.moderator)).await;
    assert_eq!(queue["moderationQueue"]["totalCount"], 2);
    let hidden = &queue["moderationQueue"]["edges"][0]["node"];
    assert_eq!(*hidden, json!({ "id": x, "flags": 3, "status": "HIDDEN" }));
    let entry = &m.log(None).await[0];
    assert_eq!(entry["action"], "HIDE_ARTICLE");
    assert!(
        entry["article"].is_null() && entry["moderator"].is_null(),
        "{entry}"
    );
    assert_eq!(m.log(Some(&m.moderator)).await[0]["article"]["id"], x);

    m.restore(x).await;
    assert_eq!(
        seen(&m, x, None).await,
        json!({ "status": "VISIBLE", "flags": null })
    );
    assert_eq!(
        seen(&m, x, Some(&m.moderator)).await,
        json!({ "status": "VISIBLE", "flags": 0 })
    );
    let queue = m.app.gql_ok(QUEUE, json!({}), Some(&m.moderator)).await;
    assert_eq!(
        queue["moderationQueue"]["totalCount"], 1,
        "restore clears the flags"
    );
}

#[tokio::test]
async fn flags_are_rate_limited() {
    let m = Moderated::start_with(|s| s.rate_flag = "2/3600".parse().unwrap()).await;
    let ids = ids_of(&m, 3).await;
    flag(&m, &m.moderator, &ids[0]).await;
    m.app
        .gql_ok(UNFLAG, json!({ "id": ids[0] }), Some(&m.moderator))
        .await;
    let body = flag(&m, &m.moderator, &ids[1]).await;
    assert_eq!(error_code(&body), "RATE_LIMITED", "{body}");
}

const PAGE: &str = "query($a: String, $f: Int!, $act: ModAction, $u: String, $id: ID) { \
    modLog(first: $f, after: $a, action: $act, user: $u, articleId: $id) { totalCount \
    pageInfo { hasNextPage endCursor } edges { cursor node { id action } } } }";

async fn page(m: &Moderated, vars: Value) -> Value {
    m.app.gql_ok(PAGE, vars, None).await["modLog"].clone()
}

fn node_ids(page: &Value) -> Vec<u64> {
    let edges = page["edges"].as_array().unwrap();
    edges
        .iter()
        .map(|e| e["node"]["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn every_action_writes_its_entry_and_no_refusal_writes_one() {
    let m = Moderated::start().await;
    let ids = ids_of(&m, 2).await;
    let total = async || {
        page(&m, json!({ "f": 1 })).await["totalCount"]
            .as_u64()
            .unwrap()
    };
    let mut expected = total().await;
    for id in &ids {
        assert!(m.remove(id).await["errors"].is_null());
        expected += 1;
        assert_eq!(total().await, expected, "one entry per removal");
    }
    // Already removed, missing, or by a member: nothing written.
    assert!(m.remove(&ids[0]).await["errors"].is_null());
    assert_eq!(error_code(&m.remove("999").await), "NOT_FOUND");
    let by_member = "mutation { restoreArticle(articleId: \"1\") { id } }";
    assert_eq!(
        error_code(&m.app.gql(by_member, json!({}), Some(&m.alice)).await),
        "FORBIDDEN"
    );
    let remove = "mutation($r: String!) { removeArticle(articleId: \"1\", reason: $r) { id } }";
    for reason in ["  ".to_owned(), "x".repeat(501)] {
        let body = m
            .app
            .gql(remove, json!({ "r": reason }), Some(&m.moderator))
            .await;
        assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
    }
    assert_eq!(total().await, expected);
    m.restore(&ids[0]).await;
    m.restore(&ids[0]).await;
    assert_eq!(total().await, expected + 1, "a repeated restore is a no-op");
}

#[tokio::test]
async fn the_log_pages_filters_and_keeps_exactly_the_newest_entries() {
    let m = Moderated::start_with(|s| s.modlog_max_entries = 5).await;
    let ids = ids_of(&m, 3).await;
    for id in &ids {
        m.remove(id).await;
        m.restore(id).await;
    }
    // 8 actions written (2 roles, 6 moderations); the newest 5 kept.
    let all = page(&m, json!({ "f": 100 })).await;
    assert_eq!(all["totalCount"], 5, "{all}");
    let kept = node_ids(&all);
    assert_eq!(kept, (4..=8).rev().collect::<Vec<u64>>());
    let mut paged = Vec::new();
    let mut after = Value::Null;
    loop {
        let p = page(&m, json!({ "f": 2, "a": after })).await;
        paged.extend(node_ids(&p));
        if p["pageInfo"]["hasNextPage"] == false {
            break;
        }
        after = p["pageInfo"]["endCursor"].clone();
    }
    assert_eq!(paged, kept);

    let removals = page(&m, json!({ "f": 100, "act": "REMOVE_ARTICLE" })).await;
    assert_eq!(
        node_ids(&removals),
        [7, 5],
        "the first removal's entry went"
    );
    let of_first = page(&m, json!({ "f": 100, "id": ids[0] })).await;
    assert_eq!(
        node_ids(&of_first),
        [4],
        "its removal's entry went: {of_first}"
    );
    let of_last = page(
        &m,
        json!({ "f": 100, "id": ids[2], "act": "RESTORE_ARTICLE" }),
    )
    .await;
    assert_eq!(node_ids(&of_last), [8]);
    let about_mod = page(&m, json!({ "f": 100, "u": "mod" })).await;
    assert_eq!(about_mod["totalCount"], 0, "the role entries went");
}

#[tokio::test]
async fn the_books_own_code_cannot_bring_a_removed_article_back() {
    if needed(
        "the_books_own_code_cannot_bring_a_removed_article_back",
        Program::Python,
    )
    .is_none()
    {
        return;
    }
    let m = Moderated::start().await;
    let book = Book::on(&m.app.redis);
    let id = book.post("user:bob", "from the book").await;
    book.groups(&id, &["news"], &[]).await;
    let other = book.post("user:bob", "another").await;
    let member = format!("article:{id}");
    let listed = |articles: &Value| {
        articles
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == member.as_str())
    };
    let in_group = "query($id: ID!) { group(name: \"news\") { articleCount } groups { totalCount } article(id: $id) { groups } }";
    eventually(
        "the book's post derived",
        std::time::Duration::from_secs(5),
        async || {
            let data = m
                .app
                .gql_ok(in_group, json!({ "id": id }), Some(&m.moderator))
                .await;
            if data["article"]["groups"] == json!(["news"]) {
                Ok(())
            } else {
                Err(data)
            }
        },
    )
    .await;
    // The group's cached ranking exists, as the book built it.
    assert!(listed(&book.call(&["group-articles", "news", "1"]).await));

    m.remove(&id).await;
    assert!(!listed(&book.call(&["articles", "1"]).await));
    assert!(!listed(&book.call(&["group-articles", "news", "1"]).await));
    // The book's vote finds no post time for it and fails before writing.
    assert!(book
        .try_call(&["vote", "user:carol", &member])
        .await
        .is_err());
    book.vote("user:carol", &other).await;
    book.groups(&id, &["tech"], &[]).await;
    m.app.wait_for_derivations().await;

    let views = "{ articleCount articles { id } tech: group(name: \"tech\") { articleCount } \
                 news: group(name: \"news\") { articleCount } groups { edges { node { name } } } }";
    let data = m.app.gql_ok(views, json!({}), None).await;
    assert_eq!(data["articleCount"], 1, "{data}");
    assert_eq!(data["tech"]["articleCount"], 0);
    assert_eq!(data["news"]["articleCount"], 0);
    assert!(!listed(&book.call(&["articles", "1"]).await));
    assert!(!listed(&book.call(&["group-articles", "tech", "1"]).await));

    m.restore(&id).await;
    let data = m.app.gql_ok(in_group, json!({ "id": id }), None).await;
    assert_eq!(data["article"]["groups"], json!(["news", "tech"]), "{data}");
    assert!(listed(&book.call(&["articles", "1"]).await));
    assert!(listed(&book.call(&["group-articles", "tech", "1"]).await));
}

const FACTS: &str = "query($a: ID!, $b: ID!) { \
    modLog(first: 100) { totalCount edges { node { action reason until \
      article { id status removalReason } user { name banned bannedUntil } } } } \
    bans: modLog(action: BAN_USER) { totalCount } \
    ofBob: modLog(user: \"bob\") { totalCount } \
    ofA: modLog(articleId: $a) { totalCount } \
    a: article(id: $a) { id status removalReason } \
    b: article(id: $b) { id status removalReason } \
    bob: node(id: \"user:bob\") { ... on User { name banned bannedUntil } } \
    carol: node(id: \"user:carol\") { ... on User { name banned bannedUntil } } }";

/// What the log says, as every reader sees it: each entry's action,
/// reason, ban end and user, and the filtered counts.
fn public_facts(data: &Value) -> Value {
    let entries: Vec<Value> = data["modLog"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let n = &e["node"];
            json!([n["action"], n["reason"], n["until"], n["user"]])
        })
        .collect();
    let counts = ["modLog", "bans", "ofBob", "ofA"].map(|k| data[k]["totalCount"].clone());
    json!({ "entries": entries, "counts": counts })
}

/// Checks that `data` (one reader's answer to [`FACTS`]) says on each
/// field what its log entries say: `a` is the removed article, `b` the
/// hidden one.
fn assert_fields_agree_with_the_log(data: &Value) {
    for edge in data["modLog"]["edges"].as_array().unwrap() {
        let entry = &edge["node"];
        let (field, status, reason) = match entry["action"].as_str().unwrap() {
            "BAN_USER" => {
                let user = &entry["user"];
                let name = user["name"].as_str().unwrap();
                assert_eq!(user["banned"], true, "{entry}");
                assert_eq!(user["bannedUntil"], entry["until"], "{entry}");
                assert_eq!(data[name], *user, "node(id: user:{name}) says otherwise");
                assert!(entry["reason"].is_string(), "{entry}");
                continue;
            }
            "REMOVE_ARTICLE" => ("a", "REMOVED", &entry["reason"]),
            "HIDE_ARTICLE" => ("b", "HIDDEN", &Value::Null),
            _ => continue,
        };
        let article = &entry["article"];
        assert_eq!(data[field], *article, "article(id:) says otherwise");
        if !article.is_null() {
            assert_eq!(article["status"], status, "{entry}");
            assert_eq!(article["removalReason"], *reason, "{entry}");
        }
    }
}

#[tokio::test]
async fn every_reader_sees_the_same_facts_in_the_log_and_on_the_fields() {
    let m = Moderated::start_with(|s| s.flag_threshold = 1).await;
    for name in ["bob", "carol"] {
        m.app.sign_up(name).await;
    }
    let dave = m.app.sign_up("dave").await;
    let ids = ids_of(&m, 2).await;
    let (a, b) = (ids[0].as_str(), ids[1].as_str());
    m.remove(a).await;
    flag(&m, &dave, b).await;
    let until = chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp() + 7200, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let ban = "mutation($n: String!, $r: String!, $u: DateTime) { \
               banUser(name: $n, reason: $r, until: $u) { name } }";
    for vars in [
        json!({ "n": "bob", "r": "trolling", "u": until }),
        json!({ "n": "carol", "r": "a spam bot" }),
    ] {
        m.app.gql_ok(ban, vars, Some(&m.moderator)).await;
    }

    let vars = json!({ "a": a, "b": b });
    let read = async |token: Option<&str>| m.app.gql_ok(FACTS, vars.clone(), token).await;
    let anonymous = read(None).await;
    assert_eq!(anonymous["bans"]["totalCount"], 2, "{anonymous}");
    assert_eq!(anonymous["bob"]["bannedUntil"], until.as_str());
    let facts = public_facts(&anonymous);
    for (reader, token, sees_articles) in [
        ("anonymous", None, false),
        ("a member", Some(dave.as_str()), false),
        ("the poster", Some(m.alice.as_str()), true),
        ("a moderator", Some(m.moderator.as_str()), true),
        // Again, from the response cache.
        ("anonymous", None, false),
    ] {
        let data = read(token).await;
        assert_eq!(public_facts(&data), facts, "{reader} reads another log");
        assert_fields_agree_with_the_log(&data);
        assert_eq!(
            !data["a"].is_null() && !data["b"].is_null(),
            sees_articles,
            "{reader}: {data}"
        );
    }
}
