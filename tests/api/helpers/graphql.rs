//! GraphQL over HTTP: requests to any server, the usual mutations, and
//! what tests read out of the answers.

use serde_json::{json, Value};

use super::app::TestApp;

impl TestApp {
    /// POSTs a GraphQL request and returns the JSON body.
    pub async fn gql(&self, query: &str, variables: Value, token: Option<&str>) -> Value {
        gql_at(&self.client, &self.address, query, variables, token, None).await
    }

    /// Like [`TestApp::gql`], sent with an `X-Forwarded-For` header (which
    /// names the client only when the server trusts 127.0.0.1 as a proxy).
    pub async fn gql_forwarded(
        &self,
        forwarded_for: &str,
        query: &str,
        variables: Value,
        token: Option<&str>,
    ) -> Value {
        gql_at(
            &self.client,
            &self.address,
            query,
            variables,
            token,
            Some(forwarded_for),
        )
        .await
    }

    /// Like [`TestApp::gql`] (anonymous), asking for `extensions.cost`
    /// with `X-Query-Cost`.
    pub async fn gql_with_cost(&self, query: &str, variables: Value) -> Value {
        let request = self
            .client
            .post(format!("{}/graphql", self.address))
            .header("x-query-cost", "1")
            .json(&json!({ "query": query, "variables": variables }));
        request.send().await.unwrap().json().await.unwrap()
    }

    /// Like [`TestApp::gql`], but fails the test on any GraphQL error.
    pub async fn gql_ok(&self, query: &str, variables: Value, token: Option<&str>) -> Value {
        let body = self.gql(query, variables, token).await;
        assert!(body.get("errors").is_none(), "unexpected errors: {body}");
        body["data"].clone()
    }

    /// Signs a user up (password `password-of-<name>`) and returns the token.
    pub async fn sign_up(&self, name: &str) -> String {
        let data = self
            .gql_ok(
                "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token } }",
                json!({ "n": name, "p": format!("password-of-{name}") }),
                None,
            )
            .await;
        data["signUp"]["token"].as_str().expect("token").to_owned()
    }

    /// Posts an article and returns it with every field.
    pub async fn post(&self, token: &str, title: &str, groups: &[&str]) -> Value {
        let data = self
            .gql_ok(
                &format!("mutation($t: String!, $l: String!, $g: [String!]!) {{ post(title: $t, link: $l, groups: $g) {{ {ARTICLE_FIELDS} }} }}"),
                json!({ "t": title, "l": format!("https://example.com/{}", title.replace(' ', "-")), "g": groups }),
                Some(token),
            )
            .await;
        data["post"].clone()
    }

    /// Upvotes; returns the whole GraphQL body so callers can check errors.
    pub async fn vote(&self, token: &str, id: &str) -> Value {
        self.gql(
            &format!("mutation($id: ID!) {{ vote(articleId: $id) {{ {ARTICLE_FIELDS} }} }}"),
            json!({ "id": id }),
            Some(token),
        )
        .await
    }

    /// Votes `direction` (`UP`, `DOWN`, `NONE`) as `token`, reading back
    /// only the article's id, so that the vote itself reads no article
    /// (see [`VOTE_AS`]); fails the test on any GraphQL error.
    pub async fn vote_as(&self, token: &str, id: &str, direction: &str) {
        self.gql_ok(VOTE_AS, json!({ "id": id, "d": direction }), Some(token))
            .await;
    }

    /// Ids of a page of the front page in the given order.
    pub async fn front_page_ids(&self, order: &str, page: i64, page_size: i64) -> Vec<String> {
        let data = self
            .gql_ok(
                "query($o: ArticleOrder!, $p: Int!, $s: Int!) { articles(order: $o, page: $p, pageSize: $s) { id } }",
                json!({ "o": order, "p": page, "s": page_size }),
                None,
            )
            .await;
        ids(&data["articles"])
    }
}

/// POSTs a GraphQL request to the server at `address` (any instance) and
/// returns the JSON body.
pub async fn gql_at(
    client: &reqwest::Client,
    address: &str,
    query: &str,
    variables: Value,
    token: Option<&str>,
    forwarded_for: Option<&str>,
) -> Value {
    let mut request = client
        .post(format!("{address}/graphql"))
        .json(&json!({ "query": query, "variables": variables }));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(forwarded_for) = forwarded_for {
        request = request.header("x-forwarded-for", forwarded_for);
    }
    let response = request.send().await.expect("request");
    assert!(response.status().is_success(), "HTTP {}", response.status());
    response.json().await.expect("json body")
}

/// The vote of [`TestApp::vote_as`]: `$id` in direction `$d`, reading back
/// only the id.
pub const VOTE_AS: &str =
    "mutation($id: ID!, $d: VoteDirection!) { vote(articleId: $id, direction: $d) { id } }";

pub const ARTICLE_FIELDS: &str = "id title link poster { name } postedAt votes score groups";

/// Signs `name` up at the server at `address` (any instance, or a proxy
/// in front of some) and returns the token.
pub async fn sign_up_at(client: &reqwest::Client, address: &str, name: &str) -> String {
    let body = gql_at(
        client,
        address,
        "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token } }",
        json!({ "n": name, "p": format!("password-of-{name}") }),
        None,
        None,
    )
    .await;
    body["data"]["signUp"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token: {body}"))
        .to_owned()
}

/// The `id`s of a JSON list of articles.
pub fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("list")
        .iter()
        .map(|a| a["id"].as_str().expect("id").to_owned())
        .collect()
}

/// The `extensions.code` of the first error of a response.
pub fn error_code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error with a code: {body}"))
}
