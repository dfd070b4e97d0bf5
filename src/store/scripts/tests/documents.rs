//! The register-document script: a new document kept, a known one not
//! counted, the address', site's and cap's bounds, the memory share, and
//! expired registrations pruned.

use super::*;
use crate::store::keys;

fn limits() -> RegisterLimits {
    RegisterLimits {
        ttl_secs: 100,
        max_documents: 10,
        per_address: unlimited(),
        per_site: unlimited(),
        max_memory_percent: 100,
    }
}

async fn register(c: &mut Conn, sha: &str, address: &str, limits: RegisterLimits) -> RegisterReply {
    let text = format!("{{ {sha} }}");
    let address = format!("{address}:rate:register-query");
    register_document(c, sha, &text, address, limits)
        .await
        .expect("the register-document script runs")
}

async fn registered(c: &mut Conn) -> Vec<String> {
    q(c, cmd("ZRANGE").arg(keys::DOCUMENTS).arg(0).arg(-1)).await
}

async fn exists(c: &mut Conn, key: &str) -> bool {
    q(c, cmd("EXISTS").arg(key)).await
}

#[tokio::test]
async fn a_new_document_is_kept_for_its_ttl() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    // A registration older than the TTL, its key long expired, is pruned.
    let () = q(
        c,
        cmd("ZADD")
            .arg(keys::DOCUMENTS)
            .arg(1)
            .arg(keys::document("old")),
    )
    .await;

    assert_eq!(
        register(c, "a1", "client:1", limits()).await,
        RegisterReply::Registered
    );
    let text: String = q(c, cmd("GET").arg(keys::document("a1"))).await;
    assert_eq!(text, "{ a1 }");
    let ttl: i64 = q(c, cmd("TTL").arg(keys::document("a1"))).await;
    assert!(ttl > 0 && ttl <= 100, "{ttl}");
    assert_eq!(registered(c).await, [keys::document("a1")]);
}

#[tokio::test]
async fn a_known_document_is_not_counted() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let once = RegisterLimits {
        per_address: limit(1, 60),
        ..limits()
    };
    assert_eq!(
        register(c, "a1", "client:1", once).await,
        RegisterReply::Registered
    );
    assert_eq!(
        register(c, "a1", "client:1", once).await,
        RegisterReply::Registered
    );
    let counted: u64 = q(c, cmd("GET").arg("client:1:rate:register-query")).await;
    assert_eq!(counted, 1);
    match register(c, "b2", "client:1", once).await {
        RegisterReply::AddressLimited { retry_after_secs } => {
            assert!((1..=60).contains(&retry_after_secs))
        }
        other => panic!("{other:?}"),
    }
    assert!(!exists(c, &keys::document("b2")).await);
}

#[tokio::test]
async fn the_site_limit_counts_every_address() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let site_once = RegisterLimits {
        per_site: limit(1, 60),
        ..limits()
    };
    assert_eq!(
        register(c, "a1", "client:1", site_once).await,
        RegisterReply::Registered
    );
    match register(c, "b2", "client:2", site_once).await {
        RegisterReply::SiteLimited { retry_after_secs } => {
            assert!((1..=60).contains(&retry_after_secs))
        }
        other => panic!("{other:?}"),
    }
    assert!(!exists(c, &keys::document("b2")).await);
    assert_eq!(registered(c).await, [keys::document("a1")]);
}

#[tokio::test]
async fn past_the_cap_the_oldest_documents_go() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let two = RegisterLimits {
        max_documents: 2,
        ..limits()
    };
    for sha in ["a1", "b2", "c3"] {
        assert_eq!(
            register(c, sha, "client:1", two).await,
            RegisterReply::Registered
        );
    }
    assert_eq!(
        registered(c).await,
        [keys::document("b2"), keys::document("c3")]
    );
    assert!(!exists(c, &keys::document("a1")).await);
    // A known one is refreshed to the newest place: the next to go is c3.
    register(c, "b2", "client:1", two).await;
    register(c, "d4", "client:1", two).await;
    assert_eq!(
        registered(c).await,
        [keys::document("b2"), keys::document("d4")]
    );
}

#[tokio::test]
async fn near_maxmemory_new_documents_are_refused_and_known_ones_kept() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let info: String = q(c, cmd("INFO").arg("memory")).await;
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    // Redis uses about a tenth of its maxmemory.
    let () = q(c, cmd("CONFIG").arg("SET").arg("maxmemory").arg(used * 10)).await;
    let roomy = RegisterLimits {
        max_memory_percent: 90,
        ..limits()
    };
    let tight = RegisterLimits {
        max_memory_percent: 5,
        ..limits()
    };
    assert_eq!(
        register(c, "a1", "client:1", roomy).await,
        RegisterReply::Registered
    );
    assert_eq!(
        register(c, "b2", "client:1", tight).await,
        RegisterReply::MemoryNearlyFull
    );
    assert!(!exists(c, &keys::document("b2")).await);
    let counted: u64 = q(c, cmd("GET").arg("client:1:rate:register-query")).await;
    assert_eq!(counted, 1, "a refusal for memory is not counted");
    assert_eq!(
        register(c, "a1", "client:1", tight).await,
        RegisterReply::Registered
    );
}
