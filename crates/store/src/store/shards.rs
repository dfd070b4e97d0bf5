//! Commands spread over the shards of the cluster layout (see
//! `keys::Layout`): one pipeline per primary for reads (see `nodes.rs`),
//! per shard for writes, sent in parallel, replies in the order asked; and
//! rankings split over the shards, read and merged as one. On one primary
//! there is one shard, and this is one pipeline.

use std::cmp::Ordering;
use std::future::Future;
use std::time::Duration;

use futures_util::future::{join_all, try_join_all};
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisError, Script, ServerErrorKind, Value};

use super::keys::{self, Shard};
use super::nodes::{by_shard, Group};
use super::{scripts, Store};
use crate::domain::UserName;
use crate::error::{AppError, AppResult};
use crate::rate::RateLimit;
use crate::rate::{RateAction, RateScope};

/// A rate limit as a script is given it: its counter and limit, or a
/// count of 0 when the call was counted already (see [`Store::gate`]).
#[derive(Debug, Clone)]
pub struct Gate {
    pub key: String,
    pub count: u32,
    pub window_secs: u32,
}

impl Store {
    /// Sends each read to its shard, in one round trip; the replies come in
    /// the order asked. Reads only: a call may be sent again (see
    /// [`Store::send`]); writes go through [`Store::scatter_writes`].
    pub(crate) async fn scatter(&self, commands: Vec<(Shard, Cmd)>) -> AppResult<Vec<Value>> {
        let replies = self.send(&commands).await?;
        Ok(replies
            .into_iter()
            .map(Value::extract_error)
            .collect::<redis::RedisResult<_>>()?)
    }

    /// Sends each write to its shard, one pipeline per shard, in one round
    /// trip: a write never shares a pipeline with another slot's, so it is
    /// never sent again for another's redirect.
    pub(crate) async fn scatter_writes(&self, commands: Vec<(Shard, Cmd)>) -> AppResult<()> {
        let shards: Vec<Shard> = commands.iter().map(|(s, _)| *s).collect();
        let replies = self.send_groups(&by_shard(&shards), &commands).await?;
        for reply in replies {
            reply.extract_error()?;
        }
        Ok(())
    }

    /// The replies to `commands` (error replies among them), in one round
    /// trip: one pipeline per primary, with its shards' commands (see
    /// `nodes.rs`). A primary's pipeline that meets a redirect or a lost
    /// connection (a slot moved, a failover) drops the map of primaries,
    /// and the call goes again as while the map is unknown: one pipeline
    /// per shard, routed by redis-rs, while the map is read again in the
    /// background. On one primary, one pipeline.
    async fn send(&self, commands: &[(Shard, Cmd)]) -> AppResult<Vec<Value>> {
        let shards: Vec<Shard> = commands.iter().map(|(s, _)| *s).collect();
        if let Some(groups) = self.nodes.by_node(self.layout, &shards) {
            match self.send_groups(&groups, commands).await {
                Err(AppError::Storage(e)) if misrouted(&e) => {}
                Ok(replies) if replies.iter().any(redirected) => {}
                sent => return sent,
            }
            tracing::debug!("a primary's pipeline of several shards failed; sent per shard");
            self.nodes.forget();
        }
        self.find_nodes_soon();
        self.send_groups(&by_shard(&shards), commands).await
    }

    /// Sends each group of `commands` as one pipeline, the groups in
    /// parallel; the replies come in the order of `commands`.
    async fn send_groups(
        &self,
        groups: &[Group],
        commands: &[(Shard, Cmd)],
    ) -> AppResult<Vec<Value>> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let conn = self.conn().await?;
        let sent = groups.iter().map(|group| {
            let mut pipe = redis::pipe();
            for &i in &group.commands {
                pipe.add_command(commands[i].1.clone());
            }
            let mut conn = conn.clone();
            async move {
                match group.slot {
                    Some(slot) => conn.pipeline_to(&pipe, slot).await,
                    None => conn.req_packed_commands(&pipe, 0, pipe.len()).await,
                }
            }
        });
        let replies = try_join_all(sent).await?;
        let mut out = vec![Value::Nil; commands.len()];
        for (group, replies) in groups.iter().zip(replies) {
            if replies.len() != group.commands.len() {
                return Err(AppError::Internal("a pipeline lost replies".into()));
            }
            for (&i, reply) in group.commands.iter().zip(replies) {
                out[i] = reply;
            }
        }
        Ok(out)
    }

    /// `command` on `key`'s slice on every shard, in one round trip (reads).
    pub(crate) async fn each_shard(
        &self,
        key: &str,
        command: impl Fn(String) -> Cmd,
    ) -> AppResult<Vec<Value>> {
        self.scatter(self.on_each_shard(key, command)).await
    }

    /// `command` on `key`'s slice, for every shard.
    pub(crate) fn on_each_shard(
        &self,
        key: &str,
        command: impl Fn(String) -> Cmd,
    ) -> Vec<(Shard, Cmd)> {
        let layout = self.layout;
        let commands = layout.shards().map(|s| (s, command(layout.on(s, key))));
        commands.collect()
    }

    /// The sum of [`Store::each_shard`]'s numeric replies.
    pub(crate) async fn sum_shards(&self, key: &str, command: &str) -> AppResult<u64> {
        let counts = self.each_shard(key, |key| {
            let mut count = redis::cmd(command);
            count.arg(key);
            count
        });
        Ok(counts
            .await?
            .iter()
            .filter_map(super::value_f64)
            .sum::<f64>() as u64)
    }

    /// How many shards' primaries answer a read within `wait`, of how
    /// many shards (one on one primary).
    pub async fn shards_answering(&self, wait: Duration) -> (usize, usize) {
        let layout = self.layout;
        let probe = |shard| async move {
            let mut conn = self.conn().await?;
            let mut exists = redis::cmd("EXISTS");
            exists.arg(layout.on(shard, keys::SCORE));
            AppResult::Ok(exists.query_async::<u64>(&mut conn).await?)
        };
        let probes = layout
            .shards()
            .map(|s| tokio::time::timeout(wait, probe(s)));
        let answers = join_all(probes).await;
        let answering = answers.iter().filter(|a| matches!(a, Ok(Ok(_)))).count();
        (answering, answers.len())
    }

    /// A rate limit for a script that runs on `shard`: counted by the
    /// script when its counter (`counter`, on `counter_shard`) is there
    /// too, as on one primary; else counted now, in its own step, and the
    /// script counts nothing. RATE_LIMITED for `action` in `scope` when
    /// the limit refuses.
    pub(crate) async fn gate(
        &self,
        (counter_shard, counter): (Shard, String),
        shard: Shard,
        limit: RateLimit,
        (action, scope): (RateAction, RateScope),
    ) -> AppResult<Gate> {
        let layout = self.layout;
        if counter_shard == shard {
            return Ok(Gate {
                key: layout.on(counter_shard, counter),
                count: limit.count(),
                window_secs: limit.window_secs(),
            });
        }
        let key = layout.on(counter_shard, &counter);
        let mut conn = self.conn().await?;
        let wait = super::scripts::count_rate(&mut conn, key, limit).await?;
        if wait > 0 {
            return Err(AppError::rate_limited(action, scope, wait));
        }
        Ok(Gate {
            key: layout.on(shard, counter),
            count: 0,
            window_secs: limit.window_secs(),
        })
    }
}

impl Store {
    /// [`Store::gate`] for a user's own limit of `action`, a write on
    /// `shard`, which waits while the shard's outbox is full.
    pub(crate) async fn user_gate(
        &self,
        user: &UserName,
        action: RateAction,
        shard: Shard,
        limit: RateLimit,
    ) -> AppResult<Gate> {
        self.outbox_open(shard)?;
        let counter = (
            self.layout.of_user(user),
            keys::user_rate(user.as_str(), action),
        );
        self.gate(counter, shard, limit, (action, RateScope::User))
            .await
    }
}

/// A shard's first entries of a ranking (member, value), and a count it
/// gives with them.
pub(crate) type ShardPage = (Vec<(String, f64)>, u64);

/// One shard's read of its slice of a ranking (see
/// [`Store::merged_ranking`]).
pub(crate) struct SliceRead {
    cmd: Cmd,
    /// The script `cmd` runs, if it runs one: loaded again after NOSCRIPT,
    /// which redis-rs does not do for a pipeline.
    script: Option<&'static Script>,
    /// The slice's page, from the reply; None for a reply it does not know.
    parse: fn(&Value) -> Option<ShardPage>,
}

impl SliceRead {
    pub fn command(cmd: Cmd, parse: fn(&Value) -> Option<ShardPage>) -> Self {
        Self {
            cmd,
            script: None,
            parse,
        }
    }

    pub fn script(call: scripts::Call, parse: fn(&Value) -> Option<ShardPage>) -> Self {
        Self {
            cmd: call.cmd,
            script: Some(call.script),
            parse,
        }
    }
}

impl Store {
    /// Entries `skip..skip + take` of a ranking split over the shards, best
    /// first, as one sorted set would list them, and the sum of the shards'
    /// counts. `read(shard, from, count)` reads `count` entries of a
    /// shard's slice from rank `from`: on one primary, the page itself. On
    /// a cluster each slice is read from its top, first for a share of the
    /// page, and again for all of it only where that share ran out within
    /// the page: the articles are spread evenly over the shards. Each
    /// round's reads go in one pipeline per primary.
    pub(crate) async fn merged_ranking(
        &self,
        span: (usize, usize),
        read: impl Fn(Shard, usize, usize) -> SliceRead,
    ) -> AppResult<ShardPage> {
        let shards: Vec<Shard> = self.layout.shards().collect();
        merge_slices(span, &shards, read, |reads| self.read_slices(reads)).await
    }

    /// Each read's page, the reads sent in one round trip.
    async fn read_slices(&self, reads: Vec<(Shard, SliceRead)>) -> AppResult<Vec<ShardPage>> {
        let commands: Vec<(Shard, Cmd)> = reads.iter().map(|(s, r)| (*s, r.cmd.clone())).collect();
        let mut replies = self.send_reads(&commands).await?;
        self.load_missing(&reads, &commands, &mut replies).await?;
        let page = |((_, read), reply): (&(Shard, SliceRead), Value)| {
            let reply = reply.extract_error()?;
            (read.parse)(&reply)
                .ok_or_else(|| AppError::Internal(format!("a slice's read answered {reply:?}")))
        };
        reads.iter().zip(replies).map(page).collect()
    }

    /// The replies to `commands`: a lone one sent as a command (one
    /// primary's page), several as [`Store::send`] sends them.
    async fn send_reads(&self, commands: &[(Shard, Cmd)]) -> AppResult<Vec<Value>> {
        match commands {
            [(_, cmd)] => {
                let mut conn = self.conn().await?;
                Ok(vec![conn.req_packed_command(cmd).await?])
            }
            _ => self.send(commands).await,
        }
    }

    /// Loads the scripts that replies say a primary lacks (one restarted
    /// or promoted) and sends those reads again.
    async fn load_missing(
        &self,
        reads: &[(Shard, SliceRead)],
        commands: &[(Shard, Cmd)],
        replies: &mut [Value],
    ) -> AppResult<()> {
        let missing: Vec<usize> = (0..replies.len())
            .filter(|&i| no_script(&replies[i]) && reads[i].1.script.is_some())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn().await?;
        let mut loaded: Vec<&str> = Vec::new();
        for script in missing.iter().filter_map(|&i| reads[i].1.script) {
            if !loaded.contains(&script.get_hash()) {
                script.load_async(&mut conn).await?;
                loaded.push(script.get_hash());
            }
        }
        let again: Vec<(Shard, Cmd)> = missing.iter().map(|&i| commands[i].clone()).collect();
        let again = self.send_reads(&again).await?;
        for (i, reply) in missing.into_iter().zip(again) {
            replies[i] = reply;
        }
        Ok(())
    }
}

/// [`Store::merged_ranking`]'s reads and merge over `shards`, each round
/// of reads sent by `send`.
async fn merge_slices<F, S, Fut>(
    (skip, take): (usize, usize),
    shards: &[Shard],
    read: F,
    send: S,
) -> AppResult<ShardPage>
where
    F: Fn(Shard, usize, usize) -> SliceRead,
    S: Fn(Vec<(Shard, SliceRead)>) -> Fut,
    Fut: Future<Output = AppResult<Vec<ShardPage>>>,
{
    if take == 0 {
        return Ok((Vec::new(), 0));
    }
    if let [shard] = shards {
        let page = send(vec![(*shard, read(*shard, skip, take))]).await?.pop();
        return page.ok_or_else(|| AppError::Internal("a slice's read lost its reply".into()));
    }
    let need = skip + take;
    let share = need.min(need.div_ceil(shards.len()) * 2 + 2);
    let first = shards.iter().map(|&s| (s, read(s, 0, share)));
    let mut pages = send(first.collect()).await?;
    let merged = merge(&pages);
    let cutoff = merged.get(need - 1);
    let ran_out: Vec<usize> = (0..pages.len())
        .filter(|&i| share < need && pages[i].0.len() == share)
        .filter(|&i| {
            let last = pages[i].0.last();
            last.zip(cutoff)
                .is_none_or(|(last, cut)| by_rank(last, cut).is_le())
        })
        .collect();
    let merged = if ran_out.is_empty() {
        merged
    } else {
        let again = ran_out
            .iter()
            .map(|&i| (shards[i], read(shards[i], 0, need)));
        let again = send(again.collect()).await?;
        for (i, page) in ran_out.into_iter().zip(again) {
            pages[i] = page;
        }
        merge(&pages)
    };
    let count = pages.iter().map(|p| p.1).sum();
    Ok((merged.into_iter().skip(skip).take(take).collect(), count))
}

/// Whether a pipeline failed as one sent to a primary that no longer
/// serves all its slots would: a redirect, or a lost or missing
/// connection. Not a timeout: sending again would double the wait.
fn misrouted(e: &RedisError) -> bool {
    let lost = e.is_io_error() && !e.is_timeout();
    let gone = matches!(
        e.kind(),
        ErrorKind::ClusterConnectionNotFound
            | ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    );
    e.is_cluster_error() || lost || gone
}

/// A reply that sends the command to another primary.
fn redirected(reply: &Value) -> bool {
    let redirect = |e: &redis::ServerError| {
        matches!(
            e.kind(),
            Some(ServerErrorKind::Moved | ServerErrorKind::Ask)
        )
    };
    matches!(reply, Value::ServerError(e) if redirect(e))
}

/// A reply saying the primary lacks the script.
fn no_script(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
}

/// Every page's entries in one order.
fn merge(pages: &[ShardPage]) -> Vec<(String, f64)> {
    let mut all: Vec<(String, f64)> = pages.iter().flat_map(|p| p.0.iter().cloned()).collect();
    all.sort_by(by_rank);
    all
}

/// `ZREVRANGE`'s order of one sorted set: by value, highest first, ties
/// by member, last first. Members are compared without their shard's tag,
/// as one set holds them.
fn by_rank(a: &(String, f64), b: &(String, f64)) -> Ordering {
    let untagged = |m: &str| -> usize {
        m.strip_prefix('{')
            .and_then(|r| r.find('}'))
            .map_or(0, |at| at + 2)
    };
    let (a_key, b_key) = (&a.0[untagged(&a.0)..], &b.0[untagged(&b.0)..]);
    b.1.total_cmp(&a.1).then_with(|| b_key.cmp(a_key))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering as Atomic};

    use super::*;

    /// The numbers a test's read command carries: shard, from, count.
    fn numbers(cmd: &Cmd) -> Vec<usize> {
        let number = |arg| match arg {
            redis::Arg::Simple(text) => std::str::from_utf8(text).ok()?.parse().ok(),
            _ => None,
        };
        cmd.args_iter().skip(1).filter_map(number).collect()
    }

    #[tokio::test]
    async fn a_shard_holding_the_whole_page_is_read_again_for_it() {
        // Shard 0 holds the 30 best entries, each other shard 5 worse ones
        // (tied across shards), and shard 1 one that ties with shard 0's.
        let layout = keys::Layout::cluster(keys::DEFAULT_SHARDS);
        let mut slices = vec![Vec::new(); layout.shard_count()];
        for i in 0..30 {
            slices[0].push((format!("{{s0}}a{i:02}"), 100.0 - i as f64));
        }
        for (shard, slice) in slices.iter_mut().enumerate().skip(1) {
            for i in 0..5 {
                slice.push((format!("{{s{shard}}}b{i}"), 10.0 - i as f64));
            }
        }
        slices[1].push(("{s1}a99".to_owned(), 71.0));
        for slice in &mut slices {
            slice.sort_by(by_rank);
        }
        let mut one_set: Vec<(String, f64)> = slices.concat();
        one_set.sort_by(by_rank);

        let read = |shard: Shard, from: usize, count: usize| {
            let mut slice = redis::cmd("SLICE");
            slice.arg(shard.0).arg(from).arg(count);
            SliceRead::command(slice, |_| None)
        };
        let (reads, sends) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let send = |asked: Vec<(Shard, SliceRead)>| {
            sends.fetch_add(1, Atomic::SeqCst);
            reads.fetch_add(asked.len(), Atomic::SeqCst);
            let pages = asked.iter().map(|(shard, read)| {
                let [of, from, count] = numbers(&read.cmd)[..] else {
                    panic!("{:?}", read.cmd)
                };
                assert_eq!(of, shard.0, "each read goes to its shard");
                let slice = &slices[of];
                let page = slice.iter().skip(from).take(count).cloned().collect();
                (page, slice.len() as u64)
            });
            std::future::ready(Ok(pages.collect()))
        };
        let shards: Vec<Shard> = layout.shards().collect();
        let (page, count) = merge_slices((20, 12), &shards, read, send).await.unwrap();
        assert_eq!(page, one_set[20..32].to_vec());
        assert_eq!(count, one_set.len() as u64, "each slice's count, once");
        assert_eq!(
            reads.load(Atomic::SeqCst),
            layout.shard_count() + 1,
            "shard 0 again"
        );
        assert_eq!(
            sends.load(Atomic::SeqCst),
            2,
            "each round in one round trip"
        );
    }
}
