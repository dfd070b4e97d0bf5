//! The moderation scripts in the cluster layout: every key they touch is
//! on the subject's shard, log entries are numbered for the shard and kept
//! to its share of the bound, and the last admin counts the other shards'.
//! One primary's behaviour is tested through the API (`moderation*.rs`).

use super::*;
use crate::domain::Role;
use crate::store::keys::{self, At, Layout, Shard};
use crate::store::shards::Gate;
use crate::store::ModerationLimits;

const SHARD: Shard = Shard(3);

fn cluster() -> Layout {
    Layout::cluster(keys::DEFAULT_SHARDS)
}

fn shards() -> u64 {
    cluster().shard_count() as u64
}

fn at() -> At {
    cluster().at(SHARD)
}

/// A user whose keys are on [`SHARD`].
fn local_user() -> UserName {
    (0..)
        .map(|i| user(&format!("user{i}")))
        .find(|name| cluster().of_user(name) == SHARD)
        .unwrap()
}

fn acting<'a>(actor: &'a Actor<'a>, max_entries: u64) -> Acting<'a> {
    let limits = ModerationLimits {
        flag_threshold: 1,
        modlog_max_entries: max_entries,
        ..ModerationLimits::default()
    };
    let rate = Gate {
        key: at().key("user:someone:rate:moderate"),
        count: 0,
        window_secs: 0,
    };
    Acting {
        at: at(),
        limits,
        actor,
        rate,
    }
}

fn admin<'a>(name: &'a UserName) -> Actor<'a> {
    Actor {
        name: Some(name),
        role: Role::Admin,
        reason: Some("spam"),
        limit: None,
    }
}

/// Every key in the Redis.
async fn all_keys(c: &mut Conn) -> Vec<String> {
    q(c, cmd("KEYS").arg("*")).await
}

/// An article on [`SHARD`] in group `g`.
async fn article(c: &mut Conn, poster: &UserName) -> ArticleId {
    let stem = slug("hello");
    let text = ("A title", "https://example.com/", &stem);
    let gate = post_gate(poster.as_str());
    let key = at().key(&gate.key);
    let rate = (Gate { key, ..gate }, 0);
    let in_groups = groups(&["g"]);
    let reply = post(c, (at(), 12), poster, text, &in_groups, rate);
    match reply.await.unwrap().0 {
        PostReply::Posted { id, .. } => id,
        other => panic!("not posted: {other:?}"),
    }
}

#[tokio::test]
async fn moderation_keeps_to_its_subjects_shard() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let name = local_user();
    let actor = admin(&name);
    let run = acting(&actor, 1_000_000);
    let id = article(c, &name).await;
    assert_eq!(cluster().of_article(id), SHARD);
    let account = at().key(keys::user(name.as_str()));
    hset(c, &account, &[("name", name.as_str())]).await;

    let done = ModerationReply::Done;
    assert_eq!(
        flag(c, &run, id, (true, true)).await.unwrap(),
        done,
        "hidden"
    );
    let (member, queue) = (
        at().key(keys::article(id)),
        at().key(keys::MODERATION_QUEUE),
    );
    assert_eq!(zscore(c, &queue, &member).await, Some(1.0));
    let out = at().key(keys::user_articles_out(name.as_str()));
    assert!(zscore(c, &out, &member).await.is_some(), "out");
    assert_eq!(moderate_article(c, &run, id, true).await.unwrap(), done);
    assert_eq!(moderate_article(c, &run, id, false).await.unwrap(), done);
    let by_time = at().key(keys::user_articles(name.as_str(), Ranking::Time));
    assert!(zscore(c, &by_time, &member).await.is_some(), "back");
    let ban = UserAction::Ban(None);
    // A member's ban needs no count of the other shards.
    assert_eq!(
        moderate_user(c, &run, &name, ban, AdminsCheck::Uncounted)
            .await
            .unwrap(),
        ModerationReply::OwnAccount
    );
    let other = acting(&actor, 1_000_000);
    let role = UserAction::SetRole(Role::Moderator);
    assert_eq!(
        moderate_user(c, &other, &name, role, AdminsCheck::Unneeded)
            .await
            .unwrap(),
        done
    );

    let tag = at().tag();
    for key in all_keys(c).await {
        assert!(key.starts_with(tag), "{key} is off the shard");
    }
    // The group's size went to the outbox, for the group's shard.
    let queued: u64 = q(c, cmd("XLEN").arg(at().key(keys::OUTBOX))).await;
    assert_eq!(
        queued, 4,
        "the post's karma and g's size, the hide, the restore"
    );
}

#[tokio::test]
async fn log_entries_are_numbered_for_their_shard_and_kept_to_its_share() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let name = local_user();
    let actor = admin(&name);
    // Two entries per shard.
    let run = acting(&actor, 2 * shards());
    let id = article(c, &name).await;
    let before = redis_now(c).await;
    for remove in [true, false, true] {
        moderate_article(c, &run, id, remove).await.unwrap();
    }
    let log: Vec<(String, f64)> = zset(c, &at().key(keys::MODLOG)).await;
    assert_eq!(log.len(), 2, "{log:?}");
    let numbers: Vec<u64> = log.iter().map(|(n, _)| n.parse().unwrap()).collect();
    for n in &numbers {
        assert_eq!(n % shards(), 3, "{n} names its shard");
        assert!(
            n / shards() >= (before * 1000.0) as u64,
            "{n} follows the clock"
        );
    }
    assert!(numbers[0] < numbers[1]);
    let filter = ModLogFilter::default();
    let page = modlog_page(c, at(), &filter, None, 10).await.unwrap();
    assert_eq!(page.total, 2);
    let read: Vec<u64> = page.entries.iter().map(|e| e.n).collect();
    assert_eq!(read, [numbers[1], numbers[0]], "newest first");
    assert_eq!(page.entries[0].article, Some(id));
    let after = modlog_page(c, at(), &filter, Some(numbers[1]), 10);
    let after: Vec<u64> = after.await.unwrap().entries.iter().map(|e| e.n).collect();
    assert_eq!(after, [numbers[0]]);
}

#[tokio::test]
async fn the_last_admin_counts_the_admins_of_other_shards() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let name = local_user();
    let account = at().key(keys::user(name.as_str()));
    hset(c, &account, &[("role", "admin")]).await;
    let admins = at().key(keys::ADMINS);
    let () = q(c, cmd("SADD").arg(admins).arg(name.as_str())).await;
    let other = user("someone");
    let actor = admin(&other);
    let run = acting(&actor, 100);
    let demote = UserAction::SetRole(Role::Member);
    // Uncounted, an admin's demotion asks for the count first.
    let reply = moderate_user(c, &run, &name, demote, AdminsCheck::Uncounted)
        .await
        .unwrap();
    assert_eq!(reply, ModerationReply::Recount);
    let alone = AdminsGuard {
        number: 7,
        elsewhere: 0,
    };
    let reply = moderate_user(c, &run, &name, demote, AdminsCheck::Counted(alone))
        .await
        .unwrap();
    assert_eq!(reply, ModerationReply::LastAdmin);
    // A newer guard counted this shard since: count again, nothing written.
    assert_eq!(count_admins(c, at(), 8).await.unwrap(), 1);
    let stale = AdminsGuard {
        number: 7,
        elsewhere: 1,
    };
    let reply = moderate_user(c, &run, &name, demote, AdminsCheck::Counted(stale))
        .await
        .unwrap();
    assert_eq!(reply, ModerationReply::Recount);
    assert!(exists(c, &at().key(keys::ADMINS)).await);
    let newest = AdminsGuard {
        number: 8,
        elsewhere: 1,
    };
    let reply = moderate_user(c, &run, &name, demote, AdminsCheck::Counted(newest))
        .await
        .unwrap();
    assert_eq!(reply, ModerationReply::Done);
    assert!(!exists(c, &at().key(keys::ADMINS)).await);
    // An older guard's count does not move the newest back.
    assert_eq!(count_admins(c, at(), 3).await.unwrap(), 0);
    let guard: u64 = q(c, cmd("GET").arg(at().key(keys::ADMINS_GUARD))).await;
    assert_eq!(guard, 8);
}

/// The guard's numbers rise, from at least the clock's millisecond.
#[tokio::test]
async fn guard_numbers_rise_from_the_clocks_millisecond() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let site = cluster().at(cluster().site());
    let now_ms = (redis_now(c).await * 1000.0) as u64;
    let first = next_admins_guard(c, site).await.unwrap();
    let second = next_admins_guard(c, site).await.unwrap();
    assert!(
        first >= now_ms && second > first,
        "{now_ms} {first} {second}"
    );
}
