//! The sign-up script (the folded-name index awaited, taken names counted,
//! the limit) and the index of existing accounts' folded names; accounts,
//! sessions and case twins are tested through the API (`auth.rs`).

use std::collections::HashMap;

use super::*;
use crate::store::keys::{self, At};

const RATE: &str = "client:10.0.0.1:rate:sign-up";

async fn sign_up_as(c: &mut Conn, name: &str, token: &str, limit: RateLimit) -> SignUpReply {
    let (account, rate) = ((&user(name), "$argon2id$hash"), gate(RATE, limit));
    let reply = sign_up(c, At::SINGLE, account, 1_700_000_000, token, rate).await;
    reply.expect("the sign-up script runs")
}

async fn index_built(c: &mut Conn) {
    let () = q(c, cmd("SET").arg(keys::NAMES_INDEX_BUILT).arg(1)).await;
}

/// Until the folded-name index is built, sign-ups wait, uncounted.
#[tokio::test]
async fn sign_ups_wait_for_the_folded_name_index() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    assert_eq!(
        sign_up_as(c, "alice", "t1", unlimited()).await,
        SignUpReply::Indexing
    );
    assert!(!exists(c, &keys::user("alice")).await);
    assert!(!exists(c, RATE).await);
    assert!(!exists(c, &keys::session("t1")).await);
}

#[tokio::test]
async fn taken_names_and_case_twins_are_refused_and_counted() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    index_built(c).await;
    assert_eq!(
        sign_up_as(c, "alice", "t1", unlimited()).await,
        SignUpReply::Created
    );
    assert_eq!(
        sign_up_as(c, "alice", "t2", unlimited()).await,
        SignUpReply::Taken
    );
    // `ALICE` has no account of its own: its folded name is taken.
    assert_eq!(
        sign_up_as(c, "ALICE", "t3", unlimited()).await,
        SignUpReply::Taken
    );
    assert!(!exists(c, &keys::user("ALICE")).await);
    assert!(!exists(c, &keys::session("t2")).await);
    assert!(!exists(c, &keys::session("t3")).await);
    let counted: u64 = q(c, cmd("GET").arg(RATE)).await;
    assert_eq!(counted, 3, "taken names count against the limit");

    let once = limit(1, 60);
    let () = q(c, cmd("DEL").arg(RATE)).await;
    assert_eq!(sign_up_as(c, "bob", "t4", once).await, SignUpReply::Created);
    match sign_up_as(c, "carol", "t5", once).await {
        SignUpReply::Limited(retry_after_secs) => assert!((1..=60).contains(&retry_after_secs)),
        other => panic!("{other:?}"),
    }
    assert!(!exists(c, &keys::user("carol")).await);
}

/// Each folded name goes to its oldest account, by `created` then by name.
#[tokio::test]
async fn index_names_gives_each_folded_name_its_oldest_account() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    for (name, created) in [
        ("Bob", "200"),
        ("bob", "100"),
        ("carol", "50"),
        ("Dave", "7"),
        ("dave", "7"),
    ] {
        let fields = [("name", name), ("created", created)];
        hset(c, &keys::user(name), &fields).await;
    }
    let names: Vec<UserName> = ["Bob", "bob", "carol", "dave", "Dave"].map(user).to_vec();
    // Bob, then bob (older), carol, dave, then Dave (same time, first by
    // name).
    assert_eq!(index_names(c, &names).await.unwrap(), 5);
    let index: HashMap<String, String> = q(c, cmd("HGETALL").arg(keys::USERS_BY_FOLDED_NAME)).await;
    assert_eq!(index["bob"], "bob");
    assert_eq!(index["carol"], "carol");
    assert_eq!(index["dave"], "Dave");
    assert_eq!(index_names(c, &names).await.unwrap(), 0, "nothing new");
}
