//! Relay's Global Object Identification: every `Node` is fetched again by
//! its id, unknown and malformed ids are null, and `nodes` keeps order.

use serde_json::{json, Value};

use crate::helpers::{error_code, spawn_app, TestApp};

/// Relay's refetch query, as its compiler writes one for a fragment.
const REFETCH: &str = "query RefetchQuery($id: ID!) { node(id: $id) { __typename id ...Fields } }
    fragment Fields on Node {
        ... on Article { title poster { id } }
        ... on User { name karma }
        ... on Group { name articleCount }
    }";

async fn refetch(app: &TestApp, id: &str) -> Value {
    app.gql_ok(REFETCH, json!({ "id": id }), None).await["node"].clone()
}

/// alice's article in `rust`, and the ids the API gave out for it, its
/// poster and its group.
async fn seeded(app: &TestApp) -> (String, String, String) {
    let alice = app.sign_up("alice").await;
    app.post(&alice, "first", &["rust"]).await;
    let data = app
        .gql_ok(
            "{ articles { id poster { id } } group(name: \"rust\") { id } }",
            json!({}),
            None,
        )
        .await;
    let article = &data["articles"][0];
    let id = |v: &Value| v.as_str().unwrap().to_owned();
    (
        id(&article["id"]),
        id(&article["poster"]["id"]),
        id(&data["group"]["id"]),
    )
}

#[tokio::test]
async fn each_type_is_fetched_again_by_its_id() {
    let app = spawn_app().await;
    let (article, user, group) = seeded(&app).await;
    assert_eq!(
        (user.as_str(), group.as_str()),
        ("user:alice", "group:rust")
    );
    assert!(article.parse::<u64>().is_ok(), "Article.id stays numeric");

    let node = refetch(&app, &article).await;
    assert_eq!(
        node,
        json!({ "__typename": "Article", "id": article, "title": "first", "poster": { "id": user } })
    );
    let node = refetch(&app, &user).await;
    assert_eq!(
        node,
        json!({ "__typename": "User", "id": user, "name": "alice", "karma": 1 })
    );
    let node = refetch(&app, &group).await;
    assert_eq!(
        node,
        json!({ "__typename": "Group", "id": group, "name": "rust", "articleCount": 1 })
    );
    // A user with an account and no article yet is a user too.
    app.sign_up("bob").await;
    assert_eq!(refetch(&app, "user:bob").await["name"], "bob");
}

#[tokio::test]
async fn unknown_and_malformed_ids_are_null() {
    let app = spawn_app().await;
    seeded(&app).await;
    let long = "7".repeat(10_000);
    for id in [
        "999",
        "user:nobody",
        "0",
        "07",
        " 1",
        "+1",
        "",
        "article:1",
        "user:",
        "user:al:ice",
        "group:",
        "group:Not A Group",
        "users:alice",
        long.as_str(),
    ] {
        assert_eq!(refetch(&app, id).await, Value::Null, "{id:?}");
    }
}

#[tokio::test]
async fn nodes_answers_each_id_in_place() {
    let app = spawn_app().await;
    let (article, user, group) = seeded(&app).await;
    let ids = [
        article.as_str(),
        "999",
        user.as_str(),
        "user:nobody",
        "nonsense",
        group.as_str(),
        article.as_str(),
    ];
    let data = app
        .gql_ok(
            "query($ids: [ID!]!) { nodes(ids: $ids) { id } }",
            json!({ "ids": ids }),
            None,
        )
        .await;
    let found = |id: &str| json!({ "id": id });
    assert_eq!(
        data["nodes"],
        json!([
            found(&article),
            null,
            found(&user),
            null,
            null,
            found(&group),
            found(&article)
        ])
    );
}

/// What `query` costs, as `X-Query-Cost` reports it.
async fn cost(app: &TestApp, query: &str, variables: Value) -> Value {
    app.gql_with_cost(query, variables).await["extensions"]["cost"]["requested"].clone()
}

#[tokio::test]
async fn node_costs_its_object_and_nodes_its_ids() {
    let app = spawn_app().await;
    let node = "{ node(id: \"1\") { id ... on Article { poster { name } } ... on User { articles(pageSize: 5) { id } } } }";
    // The node, the poster, and the five articles a user would have.
    assert_eq!(cost(&app, node, json!({})).await, 1 + 1 + 5);
    let query = "query($ids: [ID!]!, $one: ID!) { a: nodes(ids: $ids) { id } b: nodes(ids: [$one, \"4\"]) { id } }";
    let variables = json!({ "ids": ["1", "2", "3"], "one": "5" });
    assert_eq!(cost(&app, query, variables).await, 3 + 2);
}

#[tokio::test]
async fn nodes_takes_at_most_100_ids_and_is_priced_by_them() {
    let app = spawn_app().await;
    let query = "query($ids: [ID!]!) { nodes(ids: $ids) { id } }";
    let hundred: Vec<String> = (1..=100).map(|i| i.to_string()).collect();
    let data = app.gql_ok(query, json!({ "ids": hundred }), None).await;
    assert_eq!(data["nodes"].as_array().unwrap().len(), 100);

    let too_many: Vec<String> = (1..=101).map(|i| i.to_string()).collect();
    let body = app.gql(query, json!({ "ids": too_many }), None).await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
    assert_eq!(body["errors"][0]["extensions"]["field"], "ids");
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("at most 100"));

    let priced: Vec<String> = (1..=10_001).map(|i| i.to_string()).collect();
    let body = app.gql(query, json!({ "ids": priced }), None).await;
    assert_eq!(error_code(&body), "QUERY_TOO_COMPLEX", "{body}");
    assert!(body.get("data").is_none());
}
