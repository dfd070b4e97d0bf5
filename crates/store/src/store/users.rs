//! Accounts and login sessions.

use std::collections::HashMap;

use redis::Value;

use super::deriver::scan;
use super::keys;
use super::keys::Shard;
use super::scripts::{self, LogInReply, LoginAttemptReply, SignUpReply};
use super::{value_f64, value_str, Conn, Store};
use crate::client_addr::ClientAddr;
use crate::domain::{PageRequest, Role, UserName};
use crate::error::{AppError, AppResult};
use crate::rate::RateAction;
use crate::rate::RateLimit;
use crate::rate::RateScope;
use futures_util::future::try_join_all;

/// How many logIn attempts one user name gets per window. Counting by name
/// stops password guessing against an account however many addresses the
/// guesses come from; the price is that someone who knows a name can keep
/// its owner from logging in for a window, which existing sessions survive.
#[derive(Debug, Clone, Copy)]
pub struct LoginLimit {
    pub attempts: u32,
    pub window_secs: u64,
}

impl Store {
    /// Refuses a signUp from `client` when its budget is already spent,
    /// without counting it.
    ///
    /// The count itself happens in [`Store::create_user`], atomically with
    /// the write; this read only spares the password hash (tens of
    /// milliseconds of a CPU, queued behind one permit per core) for
    /// sign-ups that would be refused anyway, so a flood of them cannot
    /// delay everyone else's logins.
    pub async fn sign_up_budget(&self, client: ClientAddr, limit: RateLimit) -> AppResult<()> {
        let layout = self.layout;
        let key = layout.on(
            layout.of_client(client),
            keys::client_rate(client, RateAction::SignUp),
        );
        let mut conn = self.conn().await?;
        let (count, ttl): (Option<u64>, i64) = redis::pipe()
            .cmd("GET")
            .arg(&key)
            .cmd("TTL")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        match count {
            Some(n) if n >= u64::from(limit.count()) && ttl > 0 => Err(AppError::rate_limited(
                RateAction::SignUp,
                RateScope::Address,
                ttl as u64,
            )),
            _ => Ok(()),
        }
    }

    /// Creates an account together with its first session, counting the
    /// sign-up against `client`'s `limit`. Returns false, writing nothing,
    /// when the name is taken.
    pub async fn create_user(
        &self,
        name: &UserName,
        password_hash: &str,
        token_hash: &str,
        client: ClientAddr,
        limit: RateLimit,
    ) -> AppResult<bool> {
        let created = chrono::Utc::now().timestamp();
        let layout = self.layout;
        let at = layout.at(layout.of_user(name));
        let counter = keys::client_rate(client, RateAction::SignUp);
        let counter = (layout.of_client(client), counter);
        let refused = (RateAction::SignUp, RateScope::Address);
        let rate = self.gate(counter, at.shard, limit, refused).await?;
        let mut conn = self.conn().await?;
        let mut reply = SignUpReply::Indexing;
        for attempt in 0..2 {
            if attempt > 0 {
                // The index is gone (a Redis that came back empty, or the
                // first start could not reach it): build it, then retry.
                self.build_name_index().await?;
            }
            let (name, rate) = ((name, password_hash), rate.clone());
            reply = scripts::sign_up(&mut conn, at, name, created, token_hash, rate).await?;
            if reply != SignUpReply::Indexing {
                break;
            }
        }
        match reply {
            SignUpReply::Created => Ok(true),
            SignUpReply::Taken => Ok(false),
            SignUpReply::Indexing => Err(AppError::Starting {
                retry_after_secs: 5,
            }),
            SignUpReply::Limited(secs) => Err(AppError::rate_limited(
                RateAction::SignUp,
                RateScope::Address,
                secs,
            )),
        }
    }

    /// The account `name` logs into, with its stored argon2 password hash:
    /// the account of that exact name, else the one its case variants
    /// fold to (see `UserName::folded`). None when there is none.
    pub async fn account(&self, name: &UserName) -> AppResult<Option<(UserName, String)>> {
        // Case twins fold alike, and so share the account's shard.
        let at = self.layout.at(self.layout.of_user(name));
        let mut conn = self.conn().await?;
        let (exact, twin): (Option<String>, Option<String>) = redis::pipe()
            .cmd("HGET")
            .arg(at.key(keys::user(name.as_str())))
            .arg("password")
            .cmd("HGET")
            .arg(at.key(keys::USERS_BY_FOLDED_NAME))
            .arg(name.folded().as_str())
            .query_async(&mut conn)
            .await?;
        if let Some(hash) = exact {
            return Ok(Some((name.clone(), hash)));
        }
        let Some(twin) = twin.filter(|twin| twin != name.as_str()) else {
            return Ok(None);
        };
        let hash: Option<String> = redis::cmd("HGET")
            .arg(at.key(keys::user(&twin)))
            .arg("password")
            .query_async(&mut conn)
            .await?;
        Ok(hash.map(|hash| (UserName::from_stored(twin), hash)))
    }

    /// Indexes the existing accounts by folded name, unless that was done
    /// (its marker is set); sign-ups wait for the marker. Each batch of
    /// `user:` keys is indexed in one script call.
    pub async fn build_name_index(&self) -> AppResult<Option<u64>> {
        // One pass at a time in this process; a second caller finds the
        // marker set by the first.
        let _building = self.name_index.lock().await;
        let (marker, prefix) = (keys::NAMES_INDEX_BUILT, keys::USER_PREFIX);
        self.once_over_keys(marker, prefix, "hash", async |conn, found| {
            // Accounts only: `user:<name>`, not `user:<name>:<attr>`.
            let names: Vec<UserName> = found
                .iter()
                .filter_map(|key| key.strip_prefix(keys::USER_PREFIX))
                .filter(|rest| !rest.contains(':'))
                .filter_map(|name| UserName::parse(name).ok())
                .collect();
            match names.is_empty() {
                true => Ok(0),
                false => scripts::index_names(conn, &names).await,
            }
        })
        .await
    }

    /// Runs `batch` on the keys of type `ty` under `prefix`, one
    /// `SCAN` step at a time, unless `marker` says that was done; then sets
    /// it. Answers the sum of what the batches counted, None when it was
    /// done. A cluster's keyspace has no other writer: nothing to go over.
    async fn once_over_keys(
        &self,
        marker: &str,
        prefix: &str,
        ty: &str,
        mut batch: impl AsyncFnMut(&mut Conn, Vec<String>) -> AppResult<u64>,
    ) -> AppResult<Option<u64>> {
        if self.has_marker(marker).await? {
            return Ok(None);
        }
        let (mut cursor, mut counted) = (0, 0);
        while !self.layout.is_cluster() {
            let mut conn = self.conn().await?;
            let (next, found) = scan(&mut conn, cursor, prefix, ty).await?;
            counted += batch(&mut conn, found).await?;
            if next == 0 {
                break;
            }
            cursor = next;
        }
        self.set_marker(marker).await?;
        Ok(Some(counted))
    }

    /// Counts a logIn attempt for `name` from `client`, in one script call;
    /// RATE_LIMITED when the address has used up its `client_limit` or the
    /// name its `name_limit`.
    pub async fn login_attempt(
        &self,
        name: &UserName,
        client: ClientAddr,
        name_limit: LoginLimit,
        client_limit: RateLimit,
    ) -> AppResult<()> {
        let layout = self.layout;
        let at = layout.at(layout.of_user(name));
        let counter = keys::client_rate(client, RateAction::LogIn);
        let counter = (layout.of_client(client), counter);
        let refused = (RateAction::LogIn, RateScope::Address);
        let address = self.gate(counter, at.shard, client_limit, refused);
        let address = address.await?;
        let name_limit = (name_limit.attempts, name_limit.window_secs);
        let mut conn = self.conn().await?;
        let reply = scripts::login_attempt(&mut conn, at, name, name_limit, address).await?;
        let (scope, secs) = match reply {
            LoginAttemptReply::Allowed => return Ok(()),
            LoginAttemptReply::AddressLimited(secs) => (RateScope::Address, secs),
            LoginAttemptReply::NameLimited(retry_after_secs) => (RateScope::Name, retry_after_secs),
        };
        Err(AppError::rate_limited(RateAction::LogIn, scope, secs))
    }

    /// Starts a session after a successful logIn, forgetting the name's
    /// counted attempts in the same step; BANNED, starting nothing, while
    /// the account is banned.
    pub async fn create_session(&self, token_hash: &str, name: &UserName) -> AppResult<()> {
        let mut conn = self.conn().await?;
        let at = self.layout.at(self.layout.of_user(name));
        match scripts::log_in(&mut conn, at, name, token_hash).await? {
            LogInReply::Started => Ok(()),
            LogInReply::Banned { until } => Err(AppError::Banned { until }),
        }
    }

    pub(super) fn session_key(&self, token_hash: &str) -> String {
        let layout = self.layout;
        layout.on(layout.of_session(token_hash), keys::session(token_hash))
    }

    /// Who a token hash's session is, with its account's role and ban as
    /// they are now.
    pub async fn session_user(&self, token_hash: &str) -> AppResult<Option<SessionUser>> {
        let mut conn = self.conn().await?;
        let at = self.layout.at(self.layout.of_session(token_hash));
        let session = self.session_key(token_hash);
        Ok(scripts::session_user(&mut conn, at, session).await?.0)
    }

    /// Files every session in its user's `user:<name>:sessions`, so a ban
    /// or a role reaches sessions written without their set (by a server
    /// that kept none); once, then its marker says so. A pipeline per
    /// batch of session keys.
    pub async fn index_sessions(&self) -> AppResult<Option<u64>> {
        let (marker, prefix) = (keys::SESSIONS_INDEX_BUILT, keys::SESSION_PREFIX);
        self.once_over_keys(marker, prefix, "string", async |conn, found| {
            if found.is_empty() {
                return Ok(0);
            }
            let values: Vec<Option<String>> = redis::cmd("MGET")
                .arg(&found)
                .query_async(&mut *conn)
                .await?;
            let mut pipe = redis::pipe();
            let mut filed = 0;
            for (key, value) in found.iter().zip(values) {
                let (Some(hash), Some(name)) = (key.strip_prefix(keys::SESSION_PREFIX), value)
                else {
                    continue;
                };
                let set = keys::user_sessions(name.split(' ').next().unwrap_or_default());
                pipe.sadd(&set, hash).ignore();
                pipe.expire(&set, keys::SESSION_TTL_SECS as i64).ignore();
                filed += 1;
            }
            // An empty pipeline is an error to redis-rs.
            if filed > 0 {
                let () = pipe.query_async(conn).await?;
            }
            Ok(filed)
        })
        .await
    }

    /// Revokes a session; true when one was revoked. The revocation is
    /// published in the same transaction, so every instance ends what was
    /// authenticated with it (see `crate::sessions`).
    pub async fn delete_session(&self, token_hash: &str) -> AppResult<bool> {
        let mut conn = self.conn().await?;
        let key = self.session_key(token_hash);
        let deleted = scripts::end_session(&mut conn, key, token_hash).await?;
        Ok(deleted == 1)
    }

    /// Which of `token_hashes` no longer let their user in (logged out,
    /// expired, deleted, banned): one script per shard, in parallel.
    pub(crate) async fn ended_sessions<'a>(
        &self,
        token_hashes: &[&'a str],
    ) -> AppResult<Vec<&'a str>> {
        let layout = self.layout;
        let mut by_shard: HashMap<Shard, Vec<&'a str>> = HashMap::new();
        for &hash in token_hashes {
            by_shard
                .entry(layout.of_session(hash))
                .or_default()
                .push(hash);
        }
        let checked = by_shard.into_iter().map(|(shard, hashes)| async move {
            let at = layout.at(shard);
            let sessions: Vec<String> = hashes.iter().map(|h| self.session_key(h)).collect();
            let mut conn = self.conn().await?;
            let alive = scripts::sessions_alive(&mut conn, at, &sessions).await?.0;
            let ended = hashes.into_iter().zip(alive).filter(|(_, alive)| !alive);
            AppResult::Ok(ended.map(|(hash, _)| hash).collect::<Vec<_>>())
        });
        Ok(try_join_all(checked).await?.concat())
    }
}

/// A logged-in user and their role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: UserName,
    pub role: Role,
}

/// Who a session is, as its account stands now: an active user and their
/// role, or a banned one and the ban's end (None: for good).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionUser {
    Active(Caller),
    Banned { name: UserName, until: Option<u64> },
}

/// Karma is the integer part of a `karma:` score (the fraction is the
/// tie-break, see `lua/lib/karma.lua`).
pub(super) fn karma_of(score: f64) -> i64 {
    score.floor() as i64
}

/// A user's standing on the leaderboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub karma: i64,
    /// 1-based; None for users who never received a vote.
    pub rank: Option<u64>,
}

impl Store {
    /// The `limit` users with the most karma, best first, with their karma.
    pub async fn top_posters(&self, limit: usize) -> AppResult<Vec<(String, i64)>> {
        let page = PageRequest {
            page: 1,
            page_size: limit as u32,
        };
        let top = self.merged_page(keys::KARMA, page).await?;
        Ok(top
            .into_iter()
            .map(|(member, score)| {
                let name = member
                    .strip_prefix(keys::USER_PREFIX)
                    .unwrap_or(&member)
                    .to_owned();
                (name, karma_of(score))
            })
            .collect())
    }

    /// The user each of `names` names, in one pipelined round trip: the
    /// one of that exact name (with an account, or a poster: every poster
    /// has karma), else the account its case variants fold to (see
    /// `UserName::folded`), as `logIn` finds it. Absent: no user.
    pub async fn user_names(&self, names: &[UserName]) -> AppResult<HashMap<UserName, UserName>> {
        let layout = self.layout;
        let mut commands = Vec::new();
        for name in names {
            // Case twins fold alike, and so share the account's shard.
            let at = layout.at(layout.of_user(name));
            let member = keys::user(name.as_str());
            let mut exists = redis::cmd("EXISTS");
            exists.arg(at.key(&member));
            let mut karma = redis::cmd("ZSCORE");
            karma.arg(at.key(keys::KARMA)).arg(&member);
            let mut twin = redis::cmd("HGET");
            twin.arg(at.key(keys::USERS_BY_FOLDED_NAME))
                .arg(name.folded());
            commands.extend([exists, karma, twin].map(|cmd| (at.shard, cmd)));
        }
        let replies = self.scatter(commands).await?;
        let named = |(name, replies): (&UserName, &[Value])| {
            let exact = replies[0] == Value::Int(1) || replies[1] != Value::Nil;
            let found = match exact {
                true => Some(name.clone()),
                false => value_str(&replies[2]).map(|twin| UserName::from_stored(twin.to_owned())),
            };
            found.map(|found| (name.clone(), found))
        };
        Ok(names
            .iter()
            .zip(replies.chunks_exact(3))
            .filter_map(named)
            .collect())
    }

    /// Karma and rank of many users: their karma and rank on their own
    /// shard's `karma:`, then, in the cluster layout, how many users of
    /// the other shards are above them.
    pub async fn standings(&self, names: &[String]) -> AppResult<HashMap<String, Standing>> {
        let replies = self.per_user(names, |pipe, karma, (_, member)| {
            pipe.cmd("ZSCORE").arg(karma).arg(member);
            pipe.cmd("ZREVRANK").arg(karma).arg(member);
        });
        let replies = replies.await?;
        let layout = self.layout;
        let mut above = Vec::new();
        for (name, pair) in names.iter().zip(replies.chunks_exact(2)) {
            let own = layout.of_user(&UserName::from_stored(name.clone()));
            let Some(score) = value_f64(&pair[0]) else {
                continue;
            };
            for shard in layout.shards().filter(|&s| s != own) {
                let mut count = redis::cmd("ZCOUNT");
                count
                    .arg(layout.on(shard, keys::KARMA))
                    .arg(format!("({score}"))
                    .arg("+inf");
                above.push((name, (shard, count)));
            }
        }
        let counts = self
            .scatter(above.iter().map(|(_, c)| c.clone()).collect())
            .await?;
        let mut out: HashMap<String, Standing> = HashMap::with_capacity(names.len());
        for (name, pair) in names.iter().zip(replies.chunks_exact(2)) {
            out.insert(
                name.clone(),
                Standing {
                    karma: value_f64(&pair[0]).map(karma_of).unwrap_or(0),
                    rank: match pair[1] {
                        Value::Int(r) => Some(r as u64 + 1),
                        _ => None,
                    },
                },
            );
        }
        for ((name, _), count) in above.iter().zip(counts) {
            if let (Some(standing), Some(n)) = (out.get_mut(*name), value_f64(&count)) {
                standing.rank = standing.rank.map(|r| r + n as u64);
            }
        }
        Ok(out)
    }

    /// The replies to the commands `add` pipelines for each of `names`
    /// (given its shard's `karma:`, its account's key and its member), one
    /// pipeline per shard, in one round trip.
    pub(super) async fn per_user(
        &self,
        names: &[String],
        add: impl Fn(&mut redis::Pipeline, &str, (&str, &str)),
    ) -> AppResult<Vec<Value>> {
        let layout = self.layout;
        let mut commands = Vec::new();
        for name in names {
            let at = layout.at(layout.of_user(&UserName::from_stored(name.clone())));
            let mut pipe = redis::pipe();
            let member = keys::user(name);
            add(&mut pipe, &at.key(keys::KARMA), (&at.key(&member), &member));
            commands.extend(pipe.cmd_iter().map(|c| (at.shard, c.clone())));
        }
        self.scatter(commands).await
    }
}
