//! Two votegraph instances behind a real HAProxy running the shipped
//! configuration (`deploy/haproxy/votegraph.cfg`): a vote through one
//! instance reaches a subscriber connected through the other, and an
//! instance stopped under load (SIGTERM's path, with a drain period) costs
//! no failed request.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::oneshot;

use crate::failover::Proc;
use crate::helpers::{
    done_if, eventually_every, free_port, gql_at, needed, sign_up_at, spawn_server_until,
    test_settings, Program, TestRedis, WsClient, TRANSPORT_WS,
};

/// HAProxy, killed when dropped.
fn start_haproxy(program: &str, bind: &str, one: &str, two: &str) -> Proc {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/haproxy/votegraph.cfg");
    Proc(
        Command::new(program)
            .args(["-f", config, "-db"])
            .env("LB_BIND", bind)
            .env("VOTEGRAPH_1", one)
            .env("VOTEGRAPH_2", two)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy"),
    )
}

/// GETs a query through `base`: (ok, the instance that answered).
async fn get(client: &reqwest::Client, base: &str, query: &str) -> (bool, String) {
    let response = client
        .get(format!("{base}/graphql"))
        .query(&[("query", query)])
        .send()
        .await;
    match response {
        Ok(r) => {
            let instance = r
                .headers()
                .get("x-votegraph-instance")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let ok = r.status().is_success()
                && r.json::<serde_json::Value>()
                    .await
                    .is_ok_and(|b| b["errors"].is_null());
            (ok, instance)
        }
        Err(_) => (false, String::new()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_behind_haproxy_share_events_and_one_stops_without_failures() {
    let test = "two_instances_behind_haproxy_share_events_and_one_stops_without_failures";
    let Some(haproxy) = needed(test, Program::Haproxy) else {
        return;
    };
    let redis = TestRedis::start().await;
    let settings = || {
        let mut s = test_settings(&redis);
        s.shutdown_grace_ms = 1500;
        s
    };
    let (stop_one, stopped_one) = oneshot::channel();
    let (_stop_two, stopped_two) = oneshot::channel::<()>();
    let mut one = spawn_server_until(settings(), stopped_one).await;
    let two = spawn_server_until(settings(), stopped_two).await;
    let hostport = |address: &str| address.trim_start_matches("http://").to_owned();
    let lb_bind = format!("127.0.0.1:{}", free_port());
    let _proxy = start_haproxy(
        &haproxy,
        &lb_bind,
        &hostport(&one.address),
        &hostport(&two.address),
    );
    let lb = format!("http://{lb_bind}");
    let client = reqwest::Client::new();
    // Both instances in the rotation.
    let mut served = std::collections::HashSet::new();
    eventually_every(
        "both instances to answer through HAProxy",
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let (ok, instance) = get(&client, &lb, "{ articleCount }").await;
            if ok {
                served.insert(instance);
            }
            done_if(served.len() == 2, served.clone())
        },
    )
    .await;

    // Sign up and post through the balancer.
    let mut tokens = Vec::new();
    for name in ["alice", "bob", "carol"] {
        tokens.push(sign_up_at(&client, &lb, name).await);
    }
    let (alice, bob, carol) = (&tokens[0], &tokens[1], &tokens[2]);
    let posted = gql_at(
        &client,
        &lb,
        "mutation { post(title: \"balanced\", link: \"https://example.com\") { id } }",
        json!({}),
        Some(alice),
        None,
    )
    .await;
    assert!(posted["errors"].is_null(), "{posted}");
    // A subscriber through the balancer (on one instance), and two votes
    // right after each other: round robin sends them to both instances.
    let mut subscriber = WsClient::connect_to(&lb, TRANSPORT_WS, json!({})).await;
    subscriber
        .subscribe("1", "subscription { scoreChanged { votes } }", json!({}))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut instances = std::collections::HashSet::new();
    for token in [bob, carol] {
        let response = client
            .post(format!("{lb}/graphql"))
            .bearer_auth(token)
            .json(&json!({ "query": "mutation { vote(articleId: \"1\") { votes } }" }))
            .send()
            .await
            .unwrap();
        instances.insert(
            response.headers()["x-votegraph-instance"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
        let body: serde_json::Value = response.json().await.unwrap();
        assert!(body["errors"].is_null(), "{body}");
    }
    assert_eq!(instances.len(), 2, "the votes went through both instances");
    // The subscriber hears both, one of them made through the other instance.
    let mut heard = Vec::new();
    for _ in 0..2 {
        heard.push(subscriber.next_event().await["scoreChanged"]["votes"].clone());
    }
    assert_eq!(heard, [json!(2), json!(3)]);
    drop(subscriber);

    // Steady reads through the balancer; one instance is told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let (stop, ok, failed, client, lb) = (
            stop.clone(),
            ok.clone(),
            failed.clone(),
            client.clone(),
            lb.clone(),
        );
        readers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (good, _) = get(&client, &lb, "{ articles { id votes } }").await;
                let counter = if good { &ok } else { &failed };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_one.send(());
    assert!(
        one.stopped_within(Duration::from_secs(15)).await,
        "the stopped instance never finished"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("through HAProxy while an instance stopped: {ok} ok, {failed} failed");
    assert!(ok > 100, "{ok} requests");
    assert_eq!(failed, 0, "requests failed while an instance drained");
    // Only the other instance answers now.
    let (good, instance) = get(&client, &lb, "{ articleCount }").await;
    assert!(good);
    assert_eq!(instance, "vg2");
    drop(two);
}

#[tokio::test]
async fn a_stopping_instance_drains_health_503_while_it_still_serves() {
    let redis = TestRedis::start().await;
    let mut settings = test_settings(&redis);
    settings.shutdown_grace_ms = 800;
    let (stop, stopped) = oneshot::channel();
    let mut server = spawn_server_until(settings, stopped).await;
    let client = reqwest::Client::new();
    let health = |client: reqwest::Client, address: String| async move {
        let r = client
            .get(format!("{address}/health"))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().await.unwrap())
    };
    assert_eq!(health(client.clone(), server.address.clone()).await.0, 200);
    let _ = stop.send(());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = health(client.clone(), server.address.clone()).await;
    assert_eq!((status, body["status"].as_str()), (503, Some("draining")));
    let (ok, _) = get(&client, &server.address, "{ articleCount }").await;
    assert!(ok, "requests are still served while draining");
    assert!(
        server.stopped_within(Duration::from_secs(5)).await,
        "it stops after the grace period"
    );
}
