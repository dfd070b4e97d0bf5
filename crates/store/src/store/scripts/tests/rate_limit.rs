//! The shared `rate_limit` function (`lua/lib/rate_limit.lua`), through the
//! login-attempt script, which is nothing but two of its counters.

use super::*;
use crate::store::keys::{self, At};

const ADDRESS: &str = "client:10.0.0.1:rate:log-in";

async fn attempt(c: &mut Conn, name: (u32, u64), address: RateLimit) -> LoginAttemptReply {
    login_attempt(c, At::SINGLE, &user("alice"), name, gate(ADDRESS, address))
        .await
        .expect("the login-attempt script runs")
}

async fn counter(c: &mut Conn, key: &str) -> Option<u64> {
    q(c, cmd("GET").arg(key)).await
}

async fn ttl(c: &mut Conn, key: &str) -> i64 {
    q(c, cmd("TTL").arg(key)).await
}

#[tokio::test]
async fn a_reached_limit_answers_the_seconds_left_in_the_window() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let name_key = keys::login_attempts("alice");
    for _ in 0..2 {
        assert_eq!(
            attempt(c, (100, 60), limit(2, 60)).await,
            LoginAttemptReply::Allowed
        );
    }
    // The window started with the first call.
    let left = ttl(c, ADDRESS).await;
    assert!(left > 0 && left <= 60, "{left}");
    match attempt(c, (100, 60), limit(2, 60)).await {
        LoginAttemptReply::AddressLimited(retry_after_secs) => {
            assert!(
                retry_after_secs >= 1 && retry_after_secs as i64 <= left,
                "{retry_after_secs}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Refused calls are counted too, the window unchanged; one refused by
    // its address never reaches the name's counter.
    assert_eq!(counter(c, ADDRESS).await, Some(3));
    assert!(ttl(c, ADDRESS).await <= left);
    assert_eq!(counter(c, &name_key).await, Some(2));
}

#[tokio::test]
async fn a_counter_without_a_ttl_gets_the_window_again() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let () = q(c, cmd("SET").arg(ADDRESS).arg(5)).await;
    assert_eq!(ttl(c, ADDRESS).await, -1);
    assert_eq!(
        attempt(c, (100, 60), limit(2, 30)).await,
        LoginAttemptReply::AddressLimited(30)
    );
    let left = ttl(c, ADDRESS).await;
    assert!(left > 0 && left <= 30, "{left}");
}

#[tokio::test]
async fn the_name_has_its_own_limit() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    assert_eq!(
        attempt(c, (1, 600), unlimited()).await,
        LoginAttemptReply::Allowed
    );
    match attempt(c, (1, 600), unlimited()).await {
        LoginAttemptReply::NameLimited(secs) => assert!((1..=600).contains(&secs)),
        other => panic!("{other:?}"),
    }
    // The name's counter is keyed by its folded form: a case variant
    // shares it.
    let address = gate(ADDRESS, unlimited());
    let upper = login_attempt(c, At::SINGLE, &user("ALICE"), (1, 600), address)
        .await
        .unwrap();
    assert!(
        matches!(upper, LoginAttemptReply::NameLimited { .. }),
        "{upper:?}"
    );
}
