use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::spawn_app;

#[tokio::test]
async fn redis_going_away_gives_a_clean_error_and_the_server_recovers() {
    let mut app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "before the outage", &[]).await;
    let health = format!("{}/health", app.address);
    assert_eq!(app.client.get(&health).send().await.unwrap().status(), 200);

    app.redis.stop();

    // Requests fail fast with a generic message; a hung request fails the test.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    for query in ["{ articles { id title } }", "{ articleCount }"] {
        let body: Value = client
            .post(format!("{}/graphql", app.address))
            .json(&json!({ "query": query }))
            .send()
            .await
            .expect("the server answers while redis is down")
            .json()
            .await
            .unwrap();
        let error = &body["errors"][0];
        assert_eq!(error["extensions"]["code"], "INTERNAL", "{body}");
        assert_eq!(error["message"], "storage unavailable");
        assert!(
            !body.to_string().contains("redis.sock"),
            "no internal detail leaks: {body}"
        );
    }
    assert_eq!(client.get(&health).send().await.unwrap().status(), 503);

    // Redis comes back (empty: the test server keeps no data) and so does votegraph.
    app.redis.restart().await;
    assert!(
        app.serves_again(50).await,
        "votegraph did not recover after redis restarted"
    );
    assert_eq!(app.client.get(&health).send().await.unwrap().status(), 200);
    let bob = app.sign_up("bob").await;
    let article = app.post(&bob, "after the outage", &["back"]).await;
    assert_eq!(article["id"], "1");
}
