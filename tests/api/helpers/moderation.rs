//! Moderation in tests: roles given with the real `votegraph set-role`
//! command, and the moderation mutations and reads the tests share.

use std::process::Output;

use serde_json::{json, Value};

use super::app::{spawn_app_with, spawn_server, test_settings, Instance, TestApp};
use super::graphql::gql_at;

/// Runs `votegraph set-role <name> <role>` on `redis_url`, as an operator
/// would, and returns what it did.
pub fn set_role_cli(redis_url: &str, name: &str, role: &str) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_votegraph"))
        .args(["set-role", name, role])
        .env("REDIS_URL", redis_url)
        .env_remove("REDIS_SENTINELS")
        .env_remove("REDIS_MASTER_NAME")
        .env_remove("REDIS_CLUSTER_NODES")
        .output()
        .expect("run votegraph set-role")
}

/// [`set_role_cli`] on a Redis Cluster, named by some of its nodes.
pub fn set_role_on_cluster(seeds: &str, name: &str, role: &str) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_votegraph"))
        .args(["set-role", name, role])
        .env("REDIS_CLUSTER_NODES", seeds)
        .env_remove("REDIS_URL")
        .output()
        .expect("run votegraph set-role")
}

/// A server and a second instance on its Redis, with an admin (`root`,
/// made with the command line), a moderator (`mod`, made by the admin) and
/// a member (`alice`), each logged in.
pub struct Moderated {
    pub app: TestApp,
    pub other: Instance,
    pub admin: String,
    pub moderator: String,
    pub alice: String,
}

impl Moderated {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl Fn(&mut votegraph::config::Settings)) -> Self {
        let app = spawn_app_with(&configure).await;
        let mut settings = test_settings(&app.redis);
        configure(&mut settings);
        let other = spawn_server(settings).await;
        let admin = app.sign_up("root").await;
        let out = set_role_cli(&app.redis.url(), "root", "admin");
        assert!(out.status.success(), "{out:?}");
        let moderator = app.sign_up("mod").await;
        app.gql_ok(
            "mutation { setRole(name: \"mod\", role: MODERATOR) { role } }",
            json!({}),
            Some(&admin),
        )
        .await;
        let alice = app.sign_up("alice").await;
        Self {
            app,
            other,
            admin,
            moderator,
            alice,
        }
    }

    /// A query or mutation at the second instance.
    pub async fn at_other(&self, query: &str, variables: Value, token: Option<&str>) -> Value {
        let (client, address) = (&self.app.client, &self.other.address);
        gql_at(client, address, query, variables, token, None).await
    }

    /// `removeArticle` as the moderator; the whole answer.
    pub async fn remove(&self, id: &str) -> Value {
        let query =
            "mutation($id: ID!) { removeArticle(articleId: $id, reason: \"spam\") { id status } }";
        let token = Some(self.moderator.as_str());
        self.app.gql(query, json!({ "id": id }), token).await
    }

    /// `restoreArticle` as the moderator; the whole answer.
    pub async fn restore(&self, id: &str) -> Value {
        let query = "mutation($id: ID!) { restoreArticle(articleId: $id) { id status } }";
        let token = Some(self.moderator.as_str());
        self.app.gql(query, json!({ "id": id }), token).await
    }

    /// The moderation log's entries (newest first) as `token` sees them.
    pub async fn log(&self, token: Option<&str>) -> Vec<Value> {
        let query = "{ modLog(first: 100) { totalCount edges { node { action reason \
                     moderator { name } article { id } user { name } until } } } }";
        let data = self.app.gql_ok(query, json!({}), token).await;
        let edges = data["modLog"]["edges"].as_array().expect("edges");
        edges.iter().map(|edge| edge["node"].clone()).collect()
    }
}
