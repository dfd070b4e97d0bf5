//! Articles: rankings, batched loads, posting, voting and groups.

use std::collections::HashMap;

use redis::Value;

use super::keys;
use super::keys::{Layout, Shard};
use super::scripts::{self, PostReply, Queuing, RenameSlugReply, SetGroupsReply};
use super::scripts::{ScoredMembers, ScriptReply, ViewReply, VoteReply};
use super::shards::SliceRead;
use super::votes::votes_from_reply;
use super::{scored_pairs, value_f64, value_str, Caller, Store};
use crate::client_addr::ClientAddr;
use crate::domain::{
    ArticleId, ArticleTitle, GroupName, Link, PageRequest, Slug, UserName, VoteDirection,
};
use crate::domain::{ArticleStatus, Ranking};
use crate::error::{AppError, AppResult};
use crate::rate::RateAction;
use crate::rate::RateScope;
use crate::rate::{PostLimits, RateLimit};

/// An article as stored, with what a page needs to show it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArticleRecord {
    pub id: ArticleId,
    pub title: String,
    pub link: String,
    /// The poster's name, without the `user:` prefix of the stored member.
    pub poster: String,
    /// Unix seconds, possibly fractional (the book writes `time.time()`).
    pub posted_at: f64,
    pub votes: i64,
    pub downvotes: i64,
    pub score: f64,
    pub groups: Vec<String>,
    /// None for articles written by other clients, which have no slug.
    pub slug: Option<String>,
    pub views: i64,
    /// The viewer's vote; None when nobody is logged in.
    pub my_vote: Option<VoteDirection>,
    /// Visible, hidden or removed; whether a visible one has flags is read
    /// with [`Store::moderation_details`].
    pub status: ArticleStatus,
}

/// Who views an article: each viewer counts once per view window, and
/// their counted views are rate limited per user, or per address when
/// anonymous.
#[derive(Debug, Clone)]
pub enum Viewer {
    User(Caller),
    Client(ClientAddr),
}

impl Viewer {
    /// The member in `article:<id>:viewers`.
    fn member(&self) -> String {
        match self {
            Viewer::User(caller) => keys::member(&caller.name),
            Viewer::Client(addr) => keys::client(*addr),
        }
    }

    /// Its view counter and that counter's shard.
    fn rate_key(&self, layout: Layout) -> (Shard, String) {
        match self {
            Viewer::User(caller) => (
                layout.of_user(&caller.name),
                keys::user_rate(caller.name.as_str(), RateAction::View),
            ),
            Viewer::Client(addr) => (
                layout.of_client(*addr),
                keys::client_rate(*addr, RateAction::View),
            ),
        }
    }

    fn scope(&self) -> RateScope {
        match self {
            Viewer::User(_) => RateScope::User,
            Viewer::Client(_) => RateScope::Address,
        }
    }
}

/// Whether `viewArticle` counted the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewOutcome {
    Counted,
    /// The viewer was already counted in this view window.
    Repeated,
}

/// The error for a per-user limit.
fn user_limited(action: RateAction, retry_after_secs: u64) -> AppError {
    AppError::rate_limited(action, RateScope::User, retry_after_secs)
}

/// An article id on a page, with its score when the page's read already
/// gave it (`ZREVRANGE score: … WITHSCORES`), so loading the article need
/// not ask for it again.
pub type Ranked = (ArticleId, Option<f64>);

impl Store {
    /// One page of a global ranking (`score:` or `time:`), best first. A
    /// page of `score:` comes with each article's score.
    pub async fn ranking_page(
        &self,
        ranking: Ranking,
        page: PageRequest,
    ) -> AppResult<Vec<Ranked>> {
        let page = self.merged_page(keys::ranking_key(ranking), page).await?;
        Ok(page
            .iter()
            .filter_map(|(member, score)| {
                let id = keys::article_id(member)?;
                Some((id, (ranking == Ranking::Score).then_some(*score)))
            })
            .collect())
    }

    /// One page of a sorted set of articles, highest first, from every
    /// shard's slice of it (see [`Store::merged_ranking`]).
    pub(crate) async fn merged_page(
        &self,
        key: &str,
        page: PageRequest,
    ) -> AppResult<Vec<(String, f64)>> {
        let read = |shard, from: usize, count: usize| {
            let mut range = redis::cmd("ZREVRANGE");
            range
                .arg(self.layout.on(shard, key))
                .arg(from)
                .arg(from + count - 1)
                .arg("WITHSCORES");
            SliceRead::command(range, |reply| Some((scored_pairs(reply), 0)))
        };
        Ok(self.merged_ranking(page.span(), read).await?.0)
    }

    /// One page of a group's ranking, built and cached as the book does. A
    /// page of the score ranking comes with each article's score.
    pub async fn group_page(
        &self,
        group: &GroupName,
        ranking: Ranking,
        page: PageRequest,
    ) -> AppResult<Vec<Ranked>> {
        let budget = self.group_scan_budget;
        let read = |shard, from: usize, count: usize| {
            let ranks = (from as isize, (from + count) as isize - 1);
            let at = self.layout.at(shard);
            let call = scripts::group_page(at, group, ranking, ranks, budget);
            SliceRead::script(call, |reply| Some((ScoredMembers::read(reply)?.0, 0)))
        };
        let (members, _) = self.merged_ranking(page.span(), read).await?;
        Ok(members
            .iter()
            .filter_map(|(member, score)| {
                let id = keys::article_id(member)?;
                Some((id, (ranking == Ranking::Score).then_some(*score)))
            })
            .collect())
    }

    /// Number of ranked articles.
    pub async fn article_count(&self) -> AppResult<u64> {
        self.sum_shards(keys::SCORE, "ZCARD").await
    }

    /// Number of articles in a group.
    pub async fn group_count(&self, group: &GroupName) -> AppResult<u64> {
        self.sum_shards(&keys::group(group), "SCARD").await
    }

    /// Loads many articles in one pipelined round trip, taking the scores
    /// a ranking read already gave (those articles cost no `ZSCORE`). Ids
    /// without an article hash are absent from the result. With a
    /// `viewer`, the same pipeline reads their votes on all of them, with
    /// one `ZMSCORE` of their `user:<name>:votes` index (see `votes.rs`).
    pub async fn load_ranked(
        &self,
        entries: &[Ranked],
        viewer: Option<&UserName>,
    ) -> AppResult<HashMap<ArticleId, ArticleRecord>> {
        if entries.is_empty() {
            return Ok(HashMap::new());
        }
        let layout = self.layout;
        let members: Vec<(Shard, String)> =
            entries.iter().map(|&(id, _)| self.member(id)).collect();
        let mut reads = Vec::with_capacity(entries.len() * 2 + 1);
        for (&(_, score), (shard, member)) in entries.iter().zip(&members) {
            let mut hmget = redis::cmd("HMGET");
            hmget.arg(member).arg(&ARTICLE_FIELDS[..]);
            reads.push((*shard, hmget));
            if score.is_none() {
                let mut zscore = redis::cmd("ZSCORE");
                zscore.arg(layout.on(*shard, keys::SCORE)).arg(member);
                reads.push((*shard, zscore));
            }
        }
        let articles = reads.len();
        if let Some(viewer) = viewer {
            let members: Vec<String> = members.into_iter().map(|(_, m)| m).collect();
            reads.push(self.vote_read(viewer, &members));
        }
        let mut replies = self.scatter(reads).await?;
        let votes = match viewer {
            Some(_) => {
                let reply = replies.get(articles).unwrap_or(&Value::Nil);
                Some(votes_from_reply(reply, entries.len())?)
            }
            None => None,
        };
        replies.truncate(articles);
        let mut out = HashMap::with_capacity(entries.len());
        let mut unlisted = Vec::new();
        let mut replies = replies.iter();
        let mut next = || replies.next().unwrap_or(&Value::Nil);
        for (i, &(id, score)) in entries.iter().enumerate() {
            let hash = next();
            let score = match score {
                Some(score) => Value::Double(score),
                None => next().clone(),
            };
            if let Some((mut record, groups_known)) = parse_article(id, hash, &score) {
                record.my_vote = votes
                    .as_ref()
                    .map(|v| v.get(i).copied().unwrap_or(VoteDirection::Neither));
                if !groups_known {
                    unlisted.push(id);
                }
                out.insert(id, record);
            }
        }
        // An article whose hash lists no groups was written by another
        // client and not derived yet (its group list comes from the group
        // sets, through the deriver): it reads as in no group, at no extra
        // cost, and is derived at once.
        for id in unlisted {
            self.derive_soon(keys::Touched::Article(id));
        }
        Ok(out)
    }

    /// An article's shard and its member there (also its hash's key).
    pub(crate) fn member(&self, id: ArticleId) -> (Shard, String) {
        let shard = self.layout.of_article(id);
        (shard, self.layout.on(shard, keys::article(id)))
    }

    /// The id a slug points to.
    pub async fn article_id_by_slug(&self, slug: &str) -> AppResult<Option<ArticleId>> {
        let mut conn = self.conn().await?;
        let layout = self.layout;
        let id: Option<u64> = redis::cmd("HGET")
            .arg(layout.on(layout.of_slug(slug), keys::SLUGS))
            .arg(slug)
            .query_async(&mut conn)
            .await?;
        Ok(id.map(ArticleId))
    }

    /// Gives an article a new slug; only its poster may, `limit` times per
    /// window.
    pub async fn rename_slug(
        &self,
        id: ArticleId,
        caller: &Caller,
        slug: &Slug,
        limit: RateLimit,
    ) -> AppResult<()> {
        let (layout, name) = (self.layout, &caller.name);
        let at = layout.at(layout.of_article(id));
        let rate = self.user_gate(name, RateAction::RenameSlug, at.shard, limit);
        let rate = rate.await?;
        // In the cluster layout the new slug is claimed on its own shard
        // first, and freed again if the article refuses it.
        let claim = layout.on(layout.of_slug(slug.as_str()), keys::SLUGS);
        let claimed = layout.is_cluster() && self.claim_slug(&claim, slug, id).await?;
        let moderates = caller.role.moderates();
        let mut conn = self.conn().await?;
        let reply = scripts::rename_slug(&mut conn, (at, id), name, slug, rate, moderates).await;
        let old = match reply {
            Ok(RenameSlugReply::Renamed(old)) => old,
            refused => {
                if claimed {
                    scripts::free_slug(&mut conn, claim, slug.as_str(), id).await?;
                }
                return Err(match refused? {
                    RenameSlugReply::Limited(secs) => user_limited(RateAction::RenameSlug, secs),
                    RenameSlugReply::Forbidden => {
                        AppError::Forbidden("only the poster of an article can rename its slug")
                    }
                    RenameSlugReply::Taken => AppError::SlugTaken(slug.as_str().to_owned()),
                    _ => not_found(id),
                });
            }
        };
        if let Some(old) = old.filter(|old| !old.is_empty() && old != slug.as_str()) {
            let index = layout.on(layout.of_slug(&old), keys::SLUGS);
            scripts::free_slug(&mut conn, index, &old, id).await?;
        }
        Ok(())
    }

    /// Reserves `slug` for `id` in its shard's index; false when the
    /// article had it already, SLUG_TAKEN when another has it.
    async fn claim_slug(&self, index: &str, slug: &Slug, id: ArticleId) -> AppResult<bool> {
        let mut conn = self.conn().await?;
        let (claimed, owner): (bool, Option<u64>) = redis::pipe()
            .cmd("HSETNX")
            .arg(index)
            .arg(slug.as_str())
            .arg(id.0)
            .cmd("HGET")
            .arg(index)
            .arg(slug.as_str())
            .query_async(&mut conn)
            .await
            .map_err(AppError::of_write)?;
        match owner {
            Some(owner) if owner != id.0 => Err(AppError::SlugTaken(slug.as_str().to_owned())),
            _ => Ok(claimed),
        }
    }

    /// Counts a view of an article, once per viewer per `view_window_secs`;
    /// counted views are limited to `limit` per window per viewer.
    pub async fn view_article(
        &self,
        id: ArticleId,
        viewer: &Viewer,
        limit: RateLimit,
        view_window_secs: u64,
    ) -> AppResult<ViewOutcome> {
        let at = self.layout.at(self.layout.of_article(id));
        let refused = (RateAction::View, viewer.scope());
        let rate = self.gate(viewer.rate_key(self.layout), at.shard, limit, refused);
        let rate = rate.await?;
        let moderates = matches!(viewer, Viewer::User(caller) if caller.role.moderates());
        let mut conn = self.conn().await?;
        let (member, window) = (viewer.member(), view_window_secs);
        let reply = scripts::view(&mut conn, (at, id), member, rate, window, moderates).await?;
        match reply {
            ViewReply::Counted => Ok(ViewOutcome::Counted),
            ViewReply::Repeated => Ok(ViewOutcome::Repeated),
            ViewReply::Missing => Err(not_found(id)),
            ViewReply::Limited(secs) => Err(AppError::rate_limited(
                RateAction::View,
                viewer.scope(),
                secs,
            )),
        }
    }

    /// One page of a user's own articles, newest first (their score
    /// ranking is a cache: see [`Store::ranked_page`]).
    pub async fn user_newest_page(
        &self,
        name: &str,
        page: PageRequest,
    ) -> AppResult<Vec<ArticleId>> {
        let key = keys::user_articles(name, Ranking::Time);
        let page = self.merged_page(&key, page).await?;
        Ok(page
            .iter()
            .filter_map(|(m, _)| keys::article_id(m))
            .collect())
    }

    /// Posts an article atomically and returns its id (that of the first
    /// article when the poster reposts a link, see [`PostLimits`]).
    pub async fn post_article(
        &self,
        poster: &UserName,
        title: &ArticleTitle,
        link: &Link,
        groups: &[GroupName],
        limits: PostLimits,
    ) -> AppResult<ArticleId> {
        let layout = self.layout;
        let stem = Slug::from_title(title);
        let at = layout.at(layout.of_slug(stem.as_str()));
        let rate = self.user_gate(poster, RateAction::Post, at.shard, limits.rate);
        let rate = rate.await?;
        let shards = layout.shards().count();
        let text = (title.as_str(), link.as_str(), &stem);
        let mut conn = self.conn().await?;
        let rate = (rate, limits.dedupe_secs);
        let reply = scripts::post(&mut conn, (at, shards), poster, text, groups, rate).await?;
        drop(conn);
        self.apply_outbox(at.shard);
        match reply {
            Queuing(PostReply::Posted { id, .. }, queued) => {
                if let Some(queued) = queued {
                    self.index_now(poster, id, &queued).await?;
                }
                Ok(id)
            }
            Queuing(PostReply::Limited(secs), _) => Err(user_limited(RateAction::Post, secs)),
        }
    }

    /// Sets `voter`'s vote on an article; the script checks the voting
    /// window and the voter's `limit`. True when the vote changed something (false: it was
    /// already so).
    pub async fn vote(
        &self,
        id: ArticleId,
        voter: &Caller,
        direction: VoteDirection,
        limit: RateLimit,
    ) -> AppResult<bool> {
        let layout = self.layout;
        let at = layout.at(layout.of_article(id));
        let rate = self.user_gate(&voter.name, RateAction::Vote, at.shard, limit);
        let rate = rate.await?;
        let moderates = voter.role.moderates();
        let mut conn = self.conn().await?;
        let reply = scripts::vote(&mut conn, (at, id), &voter.name, direction, rate, moderates);
        let Queuing(reply, queued) = reply.await?;
        drop(conn);
        if reply == VoteReply::Changed || queued.is_some() {
            self.apply_outbox(at.shard);
        }
        if let Some(queued) = queued {
            self.index_now(&voter.name, id, &queued).await?;
        }
        match reply {
            VoteReply::Changed => Ok(true),
            VoteReply::Same => Ok(false),
            VoteReply::Missing => Err(not_found(id)),
            VoteReply::Closed => Err(AppError::VotingClosed),
            VoteReply::Limited(secs) => Err(user_limited(RateAction::Vote, secs)),
        }
    }

    /// Adds and removes groups of an article; only its poster may, `limit`
    /// times per window.
    pub async fn set_groups(
        &self,
        id: ArticleId,
        caller: &Caller,
        add: &[GroupName],
        remove: &[GroupName],
        limit: RateLimit,
    ) -> AppResult<()> {
        let (layout, name) = (self.layout, &caller.name);
        let at = layout.at(layout.of_article(id));
        let rate = self.user_gate(name, RateAction::SetGroups, at.shard, limit);
        let rate = rate.await?;
        let moderates = caller.role.moderates();
        let mut conn = self.conn().await?;
        let groups = (add, remove);
        let reply = scripts::set_groups(&mut conn, (at, id), name, groups, rate, moderates);
        let reply = reply.await?;
        drop(conn);
        self.apply_outbox(at.shard);
        match reply {
            SetGroupsReply::Done => Ok(()),
            SetGroupsReply::Limited(secs) => Err(user_limited(RateAction::SetGroups, secs)),
            SetGroupsReply::TooManyGroups => Err(AppError::bad_input(
                "add",
                format!(
                    "an article may be in at most {} groups",
                    GroupName::MAX_PER_ARTICLE
                ),
            )),
            SetGroupsReply::Missing => Err(not_found(id)),
            SetGroupsReply::Forbidden => Err(AppError::Forbidden(
                "only the poster of an article can change its groups",
            )),
            SetGroupsReply::Out => Err(AppError::Forbidden(
                "a removed or hidden article's groups cannot change: restore it first",
            )),
        }
    }
}

pub fn not_found(id: ArticleId) -> AppError {
    AppError::NotFound(format!("no article with id {id}"))
}

/// The hash fields the API shows, in the order `HMGET` returns them.
/// Asking for them by name halves the reply next to HGETALL (no field
/// names), which the profile of a front page showed as reply parsing.
pub const ARTICLE_FIELDS: [&str; 10] = [
    "title",
    "link",
    "poster",
    "time",
    "votes",
    "downvotes",
    "slug",
    "views",
    // The article's groups, sorted and joined with ',' (group names never
    // hold one), kept by the post and set-groups scripts beside the
    // `article:<id>:groups` set, so a page reads them with the hash.
    "groups",
    // Moderation: absent on an article in view. Its flags and reason are
    // read only for those shown them: every field costs each page.
    "status",
];

/// Builds a record from `HMGET` of [`ARTICLE_FIELDS`] and the score (from
/// the ranking read or `ZSCORE score:`); the flag says whether the hash
/// listed the groups (else they are read from the set). Data written by
/// other clients is read leniently: a missing field is empty or zero rather
/// than an error, so one odd article cannot break a page. An article with
/// none of the fields does not exist.
fn parse_article(id: ArticleId, hash: &Value, score: &Value) -> Option<(ArticleRecord, bool)> {
    let Value::Array(values) = hash else {
        return None;
    };
    if values.len() != ARTICLE_FIELDS.len() || values.iter().all(|v| matches!(v, Value::Nil)) {
        return None;
    }
    let text = |i: usize| value_str(&values[i]).unwrap_or("");
    let number = |i: usize| value_f64(&values[i]).unwrap_or(0.0);
    let poster = text(2);
    let slug = text(6);
    let listed = value_str(&values[8]);
    let record = ArticleRecord {
        id,
        title: text(0).to_owned(),
        link: text(1).to_owned(),
        poster: poster
            .strip_prefix(keys::USER_PREFIX)
            .unwrap_or(poster)
            .to_owned(),
        posted_at: number(3),
        votes: number(4) as i64,
        downvotes: number(5) as i64,
        score: value_f64(score).unwrap_or(number(3)),
        groups: listed
            .map(|l| {
                l.split(',')
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        slug: (!slug.is_empty()).then(|| slug.to_owned()),
        views: number(7) as i64,
        my_vote: None,
        status: ArticleStatus::of(value_str(&values[9]), 0),
    };
    Some((record, listed.is_some()))
}
