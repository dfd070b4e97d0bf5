//! The register-document script's cap and memory share, with the known
//! documents they spare (the TTL, pruning and limits are tested through the
//! API, `persisted.rs`).

use super::*;
use crate::store::keys::{self, At};

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
    register_document(c, At::SINGLE, sha, &text, address, limits)
        .await
        .expect("the register-document script runs")
}

async fn registered(c: &mut Conn) -> Vec<String> {
    q(c, cmd("ZRANGE").arg(keys::DOCUMENTS).arg(0).arg(-1)).await
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
