//! Removal and restore, end to end with two instances on one Redis: a
//! removed article leaves every view on every instance within a second
//! (cached pages and logged-in templates included), comes back with the
//! score it had, and only its poster and moderators still see it.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    error_code, eventually, wait_for_subscriptions_at, Moderated, Subscriptions::AtLeast, WsClient,
    TRANSPORT_WS,
};

/// The contract: every view of every instance within a second.
const WITHIN: Duration = Duration::from_secs(1);

/// Every view an article can be listed in, anonymous (or, with `myVote`
/// asked, a logged-in reader's, filled from a template).
fn views_query(my_vote: bool) -> String {
    let vote = if my_vote { "myVote" } else { "" };
    let page = format!("{{ id {vote} }}");
    let feed = "{ totalCount edges { node { id } } }";
    format!(
        "query($id: ID!) {{ score: articles {page} newest: articles(order: NEWEST) {page} \
         day: articles(order: TOP_DAY) {page} week: articles(order: TOP_WEEK) {page} \
         month: articles(order: TOP_MONTH) {page} year: articles(order: TOP_YEAR) {page} \
         all: articles(order: TOP_ALL) {page} feed {feed} articleCount \
         article(id: $id) {{ id }} \
         group(name: \"news\") {{ articles {page} newest: articles(order: NEWEST) {page} \
           top: articles(order: TOP_WEEK) {page} feed {feed} articleCount }} \
         groups {{ totalCount edges {{ node {{ name articleCount }} }} }} \
         topPosters {{ user {{ name articles {page} top: articles(order: TOP_ALL) {page} \
           feed {feed} }} }} }}"
    )
}

/// Whether `id` is listed anywhere in `value`.
fn lists(value: &Value, id: &str) -> bool {
    match value {
        Value::Object(map) => {
            map.get("id").is_some_and(|v| v == id) || map.values().any(|v| lists(v, id))
        }
        Value::Array(items) => items.iter().any(|v| lists(v, id)),
        _ => false,
    }
}

/// alice's two articles in `news`, the first ahead (bob upvoted it); bob's
/// token.
async fn two_articles(m: &Moderated) -> (String, String, String) {
    let bob = m.app.sign_up("bob").await;
    let first = m.app.post(&m.alice, "first story", &["news"]).await;
    let second = m.app.post(&m.alice, "second story", &["news"]).await;
    let first = first["id"].as_str().unwrap().to_owned();
    m.app.vote_as(&bob, &first, "UP").await;
    (first, second["id"].as_str().unwrap().to_owned(), bob)
}

#[tokio::test]
async fn a_removal_leaves_every_view_of_every_instance_and_a_restore_brings_it_back() {
    let m = Moderated::start().await;
    let (first, second, bob) = two_articles(&m).await;
    let anonymous = views_query(false);
    let logged_in = views_query(true);
    let vars = json!({ "id": first });
    // Warm the other instance's cached pages and templates.
    let before = m.at_other(&anonymous, vars.clone(), None).await;
    assert!(
        lists(&before, &first) && lists(&before, &second),
        "{before}"
    );
    assert_eq!(before["data"]["articleCount"], 2);
    let before_bob = m.at_other(&logged_in, vars.clone(), Some(&bob)).await;
    assert!(lists(&before_bob, &first));
    let alice_query = "{ me { articles { id } feed { totalCount edges { node { id } } } } }";
    assert!(lists(
        &m.at_other(alice_query, json!({}), Some(&m.alice)).await,
        &first
    ));

    let removed = m.remove(&first).await;
    assert_eq!(
        removed["data"]["removeArticle"]["status"], "REMOVED",
        "{removed}"
    );

    let after = eventually("the removal on the other instance", WITHIN, async || {
        let body = m.at_other(&anonymous, vars.clone(), None).await;
        let bob_body = m.at_other(&logged_in, vars.clone(), Some(&bob)).await;
        let alice_body = m.at_other(alice_query, json!({}), Some(&m.alice)).await;
        let gone =
            !lists(&body, &first) && !lists(&bob_body, &first) && !lists(&alice_body, &first);
        if gone {
            Ok(body)
        } else {
            Err((body, bob_body, alice_body))
        }
    })
    .await;
    let data = &after["data"];
    assert!(lists(data, &second), "the other article stays: {after}");
    assert!(data["article"].is_null());
    assert_eq!(data["articleCount"], 1);
    assert_eq!(data["feed"]["totalCount"], 1);
    assert_eq!(data["group"]["articleCount"], 1);
    assert_eq!(data["group"]["feed"]["totalCount"], 1);
    assert_eq!(data["groups"]["edges"][0]["node"]["articleCount"], 1);
    assert_eq!(data["topPosters"][0]["user"]["feed"]["totalCount"], 1);

    m.restore(&first).await;
    eventually("the restore on the other instance", WITHIN, async || {
        let body = m.at_other(&anonymous, vars.clone(), None).await;
        let bob_body = m.at_other(&logged_in, vars.clone(), Some(&bob)).await;
        if body == before && bob_body == before_bob {
            Ok(())
        } else {
            Err((body, bob_body))
        }
    })
    .await;
}

#[tokio::test]
async fn a_restored_article_has_the_votes_score_and_groups_it_had() {
    let m = Moderated::start().await;
    let (first, _, bob) = two_articles(&m).await;
    let carol = m.app.sign_up("carol").await;
    m.app.vote_as(&carol, &first, "DOWN").await;
    let query =
        "query($id: ID!) { article(id: $id) { votes downvotes score groups poster { karma } } \
                 rank: articles(order: TOP_ALL) { id } }";
    let vars = json!({ "id": first });
    let before = m.app.gql_ok(query, vars.clone(), Some(&m.moderator)).await;

    m.remove(&first).await;
    // A voter's vote on it is refused as if it were gone, and changes nothing.
    assert_eq!(error_code(&m.app.vote(&bob, &first).await), "NOT_FOUND");
    m.restore(&first).await;

    let after = m.app.gql_ok(query, vars, Some(&m.moderator)).await;
    assert_eq!(after, before);
}

#[tokio::test]
async fn a_removed_article_is_shown_only_to_its_poster_and_moderators() {
    let m = Moderated::start().await;
    let (first, _, bob) = two_articles(&m).await;
    let slug = m
        .app
        .gql_ok(
            "query($id: ID!) { article(id: $id) { slug } }",
            json!({ "id": first }),
            None,
        )
        .await;
    let slug = slug["article"]["slug"].as_str().unwrap().to_owned();
    m.remove(&first).await;
    let query = "query($id: ID!, $s: String!) { article(id: $id) { id status removalReason } \
                 articleBySlug(slug: $s) { id } node(id: $id) { id } }";
    let vars = json!({ "id": first, "s": slug });
    for (token, shown) in [
        (None, false),
        (Some(&bob), false),
        (Some(&m.alice), true),
        (Some(&m.moderator), true),
    ] {
        let data = m
            .app
            .gql_ok(query, vars.clone(), token.map(String::as_str))
            .await;
        if shown {
            assert_eq!(data["article"]["status"], "REMOVED", "{data}");
            assert_eq!(data["article"]["removalReason"], "spam");
            assert_eq!(data["articleBySlug"]["id"], first.as_str());
            assert_eq!(data["node"]["id"], first.as_str());
        } else {
            let (article, slug, node) = (&data["article"], &data["articleBySlug"], &data["node"]);
            assert!(
                article.is_null() && slug.is_null() && node.is_null(),
                "{data}"
            );
        }
    }
    // Writes on it answer NOT_FOUND, but for moderators.
    let writes = [
        "mutation($id: ID!) { vote(articleId: $id) { id } }",
        "mutation($id: ID!) { flag(articleId: $id) { id } }",
        "mutation($id: ID!) { setGroups(articleId: $id, add: [\"x\"]) { id } }",
        "mutation($id: ID!) { renameSlug(articleId: $id, slug: \"renamed\") { id } }",
        "mutation($id: ID!) { viewArticle(id: $id) { id } }",
    ];
    for write in writes {
        for token in [&bob, &m.alice] {
            let body = m.app.gql(write, json!({ "id": first }), Some(token)).await;
            assert_eq!(error_code(&body), "NOT_FOUND", "{write}: {body}");
        }
    }
    let view = m.app.gql(writes[4], json!({ "id": first }), None).await;
    assert_eq!(error_code(&view), "NOT_FOUND", "{view}");
    for write in [writes[0], writes[4]] {
        let body = m
            .app
            .gql(write, json!({ "id": first }), Some(&m.moderator))
            .await;
        assert!(body["errors"].is_null(), "{write}: {body}");
    }
    // A moderator's vote waits with the score for the restore, out of sight.
    let count = m
        .app
        .gql_ok("{ articleCount articles { id } }", json!({}), None)
        .await;
    assert_eq!(count["articleCount"], 1);
    assert!(!lists(&count, &first));
}

#[tokio::test]
async fn live_clients_learn_of_removals_and_no_score_change_of_a_removed_article() {
    let m = Moderated::start().await;
    let (first, second, bob) = two_articles(&m).await;
    let other = m.app.post(&m.alice, "elsewhere", &["other"]).await;
    let other = other["id"].as_str().unwrap().to_owned();
    let address = m.other.address.clone();
    let mut removals = WsClient::connect_to(&address, TRANSPORT_WS, json!({})).await;
    removals
        .subscribe(
            "r",
            "subscription { articleRemoved(group: \"news\") }",
            json!({}),
        )
        .await;
    let mut scores = WsClient::connect_to(&address, TRANSPORT_WS, json!({})).await;
    scores
        .subscribe(
            "s",
            "subscription { scoreChanged { article { id } } }",
            json!({}),
        )
        .await;
    wait_for_subscriptions_at(&m.app.client, &address, AtLeast(2), Duration::from_secs(2)).await;

    m.remove(&other).await;
    m.remove(&first).await;
    let event = removals.next_event().await;
    assert_eq!(
        event["articleRemoved"],
        first.as_str(),
        "only news' removals"
    );

    // The moderator's vote on the removed article raises no event; bob's
    // vote on the other one does, and comes first.
    m.app.vote_as(&m.moderator, &first, "UP").await;
    m.app.vote_as(&bob, &second, "UP").await;
    let event = scores.next_event().await;
    assert_eq!(event["scoreChanged"]["article"]["id"], second.as_str());
}

#[tokio::test]
async fn a_feed_cursor_at_a_removed_article_goes_on_below_it() {
    let m = Moderated::start().await;
    let (first, second, _) = two_articles(&m).await;
    let page = "query($a: String) { feed(first: 1, after: $a) { edges { cursor node { id } } } }";
    let top = m.app.gql_ok(page, json!({ "a": null }), None).await;
    assert_eq!(top["feed"]["edges"][0]["node"]["id"], first.as_str());
    let cursor = top["feed"]["edges"][0]["cursor"].clone();
    m.remove(&first).await;
    let next = m.app.gql_ok(page, json!({ "a": cursor }), None).await;
    assert_eq!(next["feed"]["edges"][0]["node"]["id"], second.as_str());
}

/// alice's karma and rank, as anyone reads them.
async fn alices_karma(m: &Moderated) -> Value {
    let query = "{ user: node(id: \"user:alice\") { ... on User { karma rank } } \
                 topPosters { karma } }";
    m.app.gql_ok(query, json!({}), None).await
}

#[tokio::test]
async fn votes_on_a_removed_article_reach_karma_only_at_its_restore() {
    let m = Moderated::start().await;
    let (first, _, _) = two_articles(&m).await;
    // Two posts and bob's upvote.
    let before = alices_karma(&m).await;
    assert_eq!(before["user"]["karma"], 3, "{before}");

    m.remove(&first).await;
    m.app.vote_as(&m.moderator, &first, "UP").await;
    m.app.vote_as(&m.admin, &first, "DOWN").await;
    m.app.vote_as(&m.admin, &first, "NONE").await;
    assert_eq!(alices_karma(&m).await, before, "nothing changes while out");

    m.restore(&first).await;
    let after = alices_karma(&m).await;
    assert_eq!(after["user"]["karma"], 4, "the moderator's upvote: {after}");
    assert_eq!(after["topPosters"][0]["karma"], 4);

    // A vote taken back while the article is out is taken back at its
    // restore.
    m.remove(&first).await;
    m.app.vote_as(&m.moderator, &first, "NONE").await;
    assert_eq!(alices_karma(&m).await, after);
    m.restore(&first).await;
    assert_eq!(alices_karma(&m).await["user"]["karma"], 3);
}
