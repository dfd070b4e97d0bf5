//! Moderation: flags, removing and restoring articles, bans and roles,
//! the moderators' queue and the moderation log.
//!
//! Every action is one script that writes its log entry in the same step
//! (see `scripts/moderation.rs`): no action without its entry, no entry
//! without its action. An action that finds things already so (a repeated
//! flag, a removed article removed again, the same ban) writes nothing and
//! logs nothing, so a retried mutation never doubles.
//!
//! A removed or hidden article leaves every ranking, order, group and feed
//! when it is taken out, so reads never check an article's status; a
//! restore files it again with the score it had.
//!
//! In the cluster layout an action runs on its subject's shard (an
//! article's, a user's) and logs there: the queue, the log and the admins
//! are split in one slice per shard, which reads merge.
//!
//! So the last admin's guard spans shards. An action of the API that may
//! remove an admin (a ban, a role other than admin) takes a number, higher
//! than any before, on the site's shard; counts the admins of every other
//! shard under it, each shard keeping the newest number that counted it;
//! then runs on the user's shard only if no newer number counted that
//! shard since (`lua/moderate_user.lua`). Of two such actions racing, the
//! one with the newer number counted the other's shard after the older
//! one's change there, or the older one is refused there and counts
//! again: nothing is held, waited for or released, and a server dying
//! mid-way leaves no lock behind.

use std::collections::HashMap;

use futures_util::future::try_join_all;
use futures_util::{stream, StreamExt};
use redis::Value;

use super::feeds::{cursor_fields, encode_cursor, malformed_cursor};
use super::keys::{self, At, Shard};
use super::scripts::{self, Acting, Actor, ModLogFilter, ModLogRecord};
use super::scripts::{AdminsCheck, AdminsGuard, ModerationReply, UserAction};
use super::shards::Gate;
use super::users::karma_of;
use super::{not_found, value_f64, value_str, Store};
use crate::domain::{ArticleId, Ranking, Role, UserName};
use crate::error::{AppError, AppResult};
use crate::rate::{RateAction, RateScope};

/// `--flag-threshold`, the floors a flagger's account must reach for the
/// flag to count toward it, and `--modlog-max-entries`.
#[derive(Debug, Clone, Copy)]
pub struct ModerationLimits {
    pub flag_threshold: u32,
    pub flag_min_account_age_secs: u64,
    pub flag_min_karma: i64,
    pub modlog_max_entries: u64,
}

impl Default for ModerationLimits {
    fn default() -> Self {
        Self {
            flag_threshold: 5,
            flag_min_account_age_secs: 86_400,
            flag_min_karma: 10,
            modlog_max_entries: 1_000_000,
        }
    }
}

/// A user's role and ban.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Account {
    pub role: Role,
    /// A ban and its end (Unix seconds; None: for good), past or not.
    pub ban: Option<Option<u64>>,
}

impl Account {
    /// The ban in force now, with its end.
    pub fn banned(&self, now: u64) -> Option<Option<u64>> {
        self.ban.filter(|until| until.is_none_or(|u| u > now))
    }
}

/// A page of the moderation log: its entries, each with its cursor.
pub struct Page<T> {
    pub entries: Vec<(String, T)>,
    pub has_next: bool,
    pub total: u64,
}

/// Articles read per batch when a ban removes a user's articles, and how
/// many of a batch are removed at once.
const REMOVE_BATCH: isize = 100;
const REMOVE_AT_ONCE: usize = 16;

/// Counts of the admins an action that may remove one makes before it
/// answers that others kept racing it (`AdminsContended`).
const GUARD_TRIES: usize = 5;

impl Store {
    /// Sets the flag threshold and the log's bound.
    pub fn with_moderation(mut self, limits: ModerationLimits) -> Self {
        self.moderation = limits;
        self
    }

    /// Flags an article as `actor` (`flagging`), or takes the flag back.
    pub async fn flag(&self, actor: &Actor<'_>, id: ArticleId, flagging: bool) -> AppResult<()> {
        let at = self.layout.at(self.layout.of_article(id));
        let run = self.acting(actor, RateAction::Flag, at).await?;
        let may_hide = match (flagging, actor.name) {
            (true, Some(name)) => self.flags_may_hide(name).await?,
            _ => false,
        };
        let mut conn = self.conn().await?;
        let reply = scripts::flag(&mut conn, &run, id, (flagging, may_hide)).await?;
        drop(conn);
        self.apply_outbox(at.shard);
        outcome(reply, RateAction::Flag, || not_found(id)).map(drop)
    }

    /// Whether `name`'s flags count toward hiding an article: the account
    /// is old enough and has karma enough. Read on the account's shard
    /// before the flag's script, which runs on the article's. An account
    /// without a creation time predates its recording: old enough.
    async fn flags_may_hide(&self, name: &UserName) -> AppResult<bool> {
        let limits = self.moderation;
        let names = [name.as_str().to_owned()];
        let replies = self.per_user(&names, |pipe, karma, (account, member)| {
            pipe.cmd("HGET").arg(account).arg("created");
            pipe.cmd("ZSCORE").arg(karma).arg(member);
        });
        let replies = replies.await?;
        let created = replies.first().and_then(value_f64);
        let karma = replies.get(1).and_then(value_f64).map_or(0, karma_of);
        let now = chrono::Utc::now().timestamp() as f64;
        let floor = limits.flag_min_account_age_secs as f64;
        let old_enough = created.is_none_or(|created| now - created >= floor);
        Ok(old_enough && karma >= limits.flag_min_karma)
    }

    /// Removes (`remove`) or restores an article. False when it was
    /// already so.
    pub async fn moderate_article(
        &self,
        actor: &Actor<'_>,
        id: ArticleId,
        remove: bool,
    ) -> AppResult<bool> {
        let at = self.layout.at(self.layout.of_article(id));
        let run = self.acting(actor, RateAction::Moderate, at).await?;
        let mut conn = self.conn().await?;
        let reply = scripts::moderate_article(&mut conn, &run, id, remove).await?;
        drop(conn);
        self.apply_outbox(at.shard);
        outcome(reply, RateAction::Moderate, || not_found(id))
    }

    /// Bans, unbans or sets the role of `name`. False when it was already
    /// so.
    pub async fn moderate_user(
        &self,
        actor: &Actor<'_>,
        name: &UserName,
        action: UserAction,
    ) -> AppResult<bool> {
        let at = self.layout.at(self.layout.of_user(name));
        let run = self.acting(actor, RateAction::Moderate, at).await?;
        let mut check = self.first_admins_check(actor, action);
        for _ in 0..GUARD_TRIES {
            let mut conn = self.conn().await?;
            let reply = scripts::moderate_user(&mut conn, &run, name, action, check).await?;
            if reply != ModerationReply::Recount {
                return outcome(reply, RateAction::Moderate, || no_user(name));
            }
            drop(conn);
            check = AdminsCheck::Counted(self.admins_guard(at.shard).await?);
        }
        Err(AppError::AdminsContended {
            retry_after_secs: 1,
        })
    }

    /// How a moderation script on `at` runs as `actor`: its counter of
    /// `counted` is counted there, or first on the actor's shard (see
    /// `shards.rs`); without a limit, not at all.
    async fn acting<'a>(
        &self,
        actor: &'a Actor<'a>,
        counted: RateAction,
        at: At,
    ) -> AppResult<Acting<'a>> {
        let rate = match (actor.name, actor.limit) {
            (Some(name), Some(limit)) => self.user_gate(name, counted, at.shard, limit).await?,
            (name, _) => Gate {
                key: at.key(keys::user_rate(name.map_or("", UserName::as_str), counted)),
                count: 0,
                window_secs: 0,
            },
        };
        Ok(Acting {
            at,
            limits: self.moderation,
            actor,
            rate,
        })
    }

    /// The last admin's guard before anything is counted: none on one
    /// primary, where the script counts every admin; for an action that
    /// removes no admin; and for the command line, which may remove the
    /// last admin. Else the script says whether its target is an admin,
    /// so a member's ban never waits on the other shards.
    fn first_admins_check(&self, actor: &Actor<'_>, action: UserAction) -> AdminsCheck {
        let removes_admin = match action {
            UserAction::Ban(_) => true,
            UserAction::SetRole(role) => role != Role::Admin,
            UserAction::Unban => false,
        };
        match self.layout.is_cluster() && removes_admin && actor.name.is_some() {
            true => AdminsCheck::Uncounted,
            false => AdminsCheck::Unneeded,
        }
    }

    /// The last admin's guard of an action on a user of `shard` (see the
    /// module's notes): a new number, and the admins of the other shards
    /// counted under it.
    async fn admins_guard(&self, shard: Shard) -> AppResult<AdminsGuard> {
        let layout = self.layout;
        let mut conn = self.conn().await?;
        let number = scripts::next_admins_guard(&mut conn, layout.at(layout.site())).await?;
        drop(conn);
        let counts = layout.shards().filter(|&s| s != shard).map(|s| async move {
            let mut conn = self.conn().await?;
            scripts::count_admins(&mut conn, layout.at(s), number).await
        });
        let elsewhere = try_join_all(counts).await?.into_iter().sum();
        Ok(AdminsGuard { number, elsewhere })
    }

    /// Removes every article of `name`, hidden ones included, each as
    /// `removeArticle` does (with its own log entry, on its own shard).
    pub async fn remove_articles_of(&self, actor: &Actor<'_>, name: &UserName) -> AppResult<()> {
        let actor = Actor {
            limit: None,
            ..*actor
        };
        let name = name.as_str();
        // Each shard lists the user's articles that live there.
        for shard in self.layout.shards() {
            // The taken-out ones first: removing a visible one moves it there.
            for (key, leaving) in [
                (keys::user_articles_out(name), false),
                (keys::user_articles(name, Ranking::Time), true),
            ] {
                let key = self.layout.on(shard, key);
                self.remove_listed(&actor, &key, leaving).await?;
            }
        }
        Ok(())
    }

    /// Removes the articles of the sorted set `key`, in batches; `leaving`:
    /// each one removed leaves the set.
    async fn remove_listed(&self, actor: &Actor<'_>, key: &str, leaving: bool) -> AppResult<()> {
        let mut start = 0;
        loop {
            let mut conn = self.conn().await?;
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(start)
                .arg(start + REMOVE_BATCH - 1)
                .query_async(&mut conn)
                .await?;
            drop(conn);
            if members.is_empty() {
                return Ok(());
            }
            let ids = members.iter().filter_map(|m| keys::article_id(m));
            let removals: Vec<_> = ids
                .map(|id| self.moderate_article(actor, id, true))
                .collect();
            let removals = stream::iter(removals).buffer_unordered(REMOVE_AT_ONCE);
            let removed: Vec<AppResult<bool>> = removals.collect().await;
            for removed in removed {
                match removed {
                    // A removed visible article leaves the set read.
                    Ok(true) if leaving => {}
                    // Gone behind votegraph's back: nothing to remove.
                    Ok(_) | Err(AppError::NotFound(_)) => start += 1,
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// A page of the moderation log, newest first, after `after`: each
    /// shard's slice read (only the owner's for an article or a user),
    /// merged by entry number, which orders the log on every shard.
    pub async fn modlog(
        &self,
        filter: &ModLogFilter,
        after: Option<&str>,
        first: usize,
    ) -> AppResult<Page<ModLogRecord>> {
        let after = after.map(modlog_position).transpose()?;
        let layout = self.layout;
        let shards: Vec<Shard> = match filter {
            ModLogFilter {
                article: Some(id), ..
            } => vec![layout.of_article(*id)],
            ModLogFilter { user: Some(u), .. } => {
                vec![layout.of_user(&UserName::from_stored(u.clone()))]
            }
            _ => layout.shards().collect(),
        };
        let pages = shards.into_iter().map(|shard| async move {
            let mut conn = self.conn().await?;
            scripts::modlog_page(&mut conn, layout.at(shard), filter, after, first).await
        });
        let pages = try_join_all(pages).await?;
        let total = pages.iter().map(|p| p.total).sum();
        let mut entries: Vec<ModLogRecord> = pages.into_iter().flat_map(|p| p.entries).collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.n));
        let has_next = entries.len() > first;
        let entries = entries
            .into_iter()
            .take(first)
            .map(|entry| (encode_cursor(&["modlog", &entry.n.to_string()]), entry))
            .collect();
        Ok(Page {
            entries,
            has_next,
            total,
        })
    }

    /// An article's flag count and removal reason.
    pub async fn moderation_details(&self, id: ArticleId) -> AppResult<(i64, Option<String>)> {
        let mut conn = self.conn().await?;
        let (flags, reason): (Option<i64>, Option<String>) = redis::cmd("HMGET")
            .arg(self.member(id).1)
            .arg("flags")
            .arg("removal_reason")
            .query_async(&mut conn)
            .await?;
        Ok((flags.unwrap_or(0), reason))
    }

    /// The roles and bans of many users, each read on its shard, in one
    /// round trip.
    pub async fn accounts(&self, names: &[String]) -> AppResult<HashMap<String, Account>> {
        let layout = self.layout;
        let reads = names.iter().map(|name| {
            let shard = layout.of_user(&UserName::from_stored(name.clone()));
            let mut read = redis::cmd("HMGET");
            read.arg(layout.on(shard, keys::user(name)))
                .arg("role")
                .arg("banned_until");
            (shard, read)
        });
        let replies = self.scatter(reads.collect()).await?;
        Ok(names
            .iter()
            .zip(replies)
            .map(|(name, fields)| {
                let fields = match fields {
                    Value::Array(fields) => fields,
                    _ => Vec::new(),
                };
                let field = |i: usize| fields.get(i).and_then(value_str);
                let account = Account {
                    role: field(0).and_then(Role::parse).unwrap_or_default(),
                    ban: field(1).map(|until| until.parse().ok()),
                };
                (name.clone(), account)
            })
            .collect())
    }
}

/// A moderation script's answer: true when it acted, false when things
/// were already so.
fn outcome(
    reply: ModerationReply,
    action: RateAction,
    missing: impl FnOnce() -> AppError,
) -> AppResult<bool> {
    match reply {
        ModerationReply::Done => Ok(true),
        ModerationReply::Same => Ok(false),
        ModerationReply::Missing => Err(missing()),
        ModerationReply::Limited(secs) => {
            Err(AppError::rate_limited(action, RateScope::User, secs))
        }
        ModerationReply::Forbidden => Err(AppError::Forbidden(
            "only an admin can ban or unban a moderator or an admin",
        )),
        ModerationReply::OwnAccount => Err(AppError::Forbidden("no one can ban themselves")),
        ModerationReply::LastAdmin => Err(AppError::Forbidden(
            "the last admin cannot be banned or lose the role; make another admin first",
        )),
        ModerationReply::Recount => Err(AppError::AdminsContended {
            retry_after_secs: 1,
        }),
    }
}

pub fn no_user(name: &UserName) -> AppError {
    AppError::NotFound(format!("no user named {:?}", name.as_str()))
}

/// A log cursor's entry number.
fn modlog_position(cursor: &str) -> AppResult<u64> {
    match cursor_fields(cursor)?.as_slice() {
        [kind, n] if kind == "modlog" => n.parse().map_err(|_| malformed_cursor()),
        _ => Err(malformed_cursor()),
    }
}
