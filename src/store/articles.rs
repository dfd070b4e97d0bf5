//! Articles: rankings, batched loads, posting, voting and groups.

use std::collections::HashMap;

use redis::Value;

use super::keys::{self, Ranking};
use super::scripts;
use super::{value_f64, value_str, Store};
use crate::domain::{ArticleId, ArticleTitle, GroupName, Link, PageRequest, UserName};
use crate::error::{AppError, AppResult};

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
}

/// The direction of one user's vote on one article.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteDirection {
    Up,
    Down,
    None,
}

impl VoteDirection {
    fn as_arg(self) -> &'static str {
        match self {
            VoteDirection::Up => "up",
            VoteDirection::Down => "down",
            VoteDirection::None => "none",
        }
    }

    fn from_arg(s: &str) -> Self {
        match s {
            "up" => VoteDirection::Up,
            "down" => VoteDirection::Down,
            _ => VoteDirection::None,
        }
    }
}

/// What a vote did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VoteOutcome {
    pub previous: VoteDirection,
    pub changed: bool,
}

/// Commands issued per article in a batched load.
const COMMANDS_PER_ARTICLE: usize = 3;

impl Store {
    /// One page of a global ranking (`score:` or `time:`), best first.
    pub async fn ranking_page(
        &self,
        ranking: Ranking,
        page: PageRequest,
    ) -> AppResult<Vec<ArticleId>> {
        let (start, stop) = page.range();
        let mut conn = self.conn().await?;
        let members: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(ranking.key())
            .arg(start)
            .arg(stop)
            .query_async(&mut *conn)
            .await?;
        Ok(members_to_ids(&members))
    }

    /// One page of a group's ranking, built and cached as the book does.
    pub async fn group_page(
        &self,
        group: &GroupName,
        ranking: Ranking,
        page: PageRequest,
    ) -> AppResult<Vec<ArticleId>> {
        let (start, stop) = page.range();
        let mut conn = self.conn().await?;
        let members: Vec<String> = scripts::GROUP_PAGE
            .arg(group.as_str())
            .arg(ranking.key())
            .arg(start)
            .arg(stop)
            .invoke_async(&mut *conn)
            .await?;
        Ok(members_to_ids(&members))
    }

    /// Number of ranked articles.
    pub async fn article_count(&self) -> AppResult<u64> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("ZCARD")
            .arg(keys::SCORE)
            .query_async(&mut *conn)
            .await?)
    }

    /// Number of articles in a group.
    pub async fn group_count(&self, group: &GroupName) -> AppResult<u64> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("SCARD")
            .arg(keys::group(group))
            .query_async(&mut *conn)
            .await?)
    }

    /// Loads many articles in one pipelined round trip. Ids without an
    /// article hash are absent from the result.
    pub async fn load_articles(
        &self,
        ids: &[ArticleId],
    ) -> AppResult<HashMap<ArticleId, ArticleRecord>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let mut pipe = redis::pipe();
        for &id in ids {
            let member = keys::article(id);
            pipe.cmd("HGETALL").arg(&member);
            pipe.cmd("ZSCORE").arg(keys::SCORE).arg(&member);
            pipe.cmd("SMEMBERS").arg(keys::article_groups(id));
        }
        let mut conn = self.conn().await?;
        let replies: Vec<Value> = pipe.query_async(&mut *conn).await?;
        drop(conn);
        if replies.len() != ids.len() * COMMANDS_PER_ARTICLE {
            return Err(AppError::Internal(format!(
                "article pipeline returned {} replies for {} ids",
                replies.len(),
                ids.len()
            )));
        }
        let mut out = HashMap::with_capacity(ids.len());
        for (&id, chunk) in ids.iter().zip(replies.chunks_exact(COMMANDS_PER_ARTICLE)) {
            if let Some(record) = parse_article(id, &chunk[0], &chunk[1], &chunk[2]) {
                out.insert(id, record);
            }
        }
        Ok(out)
    }

    /// Posts an article atomically and returns its id.
    pub async fn post_article(
        &self,
        poster: &UserName,
        title: &ArticleTitle,
        link: &Link,
        groups: &[GroupName],
    ) -> AppResult<ArticleId> {
        let mut conn = self.conn().await?;
        let mut invocation = scripts::POST.prepare_invoke();
        invocation
            .arg(poster.member())
            .arg(title.as_str())
            .arg(link.as_str());
        for g in groups {
            invocation.arg(g.as_str());
        }
        let id: u64 = invocation.invoke_async(&mut *conn).await?;
        Ok(ArticleId(id))
    }

    /// Sets `voter`'s vote on an article; the script checks the window.
    pub async fn vote(
        &self,
        id: ArticleId,
        voter: &UserName,
        direction: VoteDirection,
    ) -> AppResult<VoteOutcome> {
        let mut conn = self.conn().await?;
        let reply: Vec<Value> = scripts::VOTE
            .arg(id.0)
            .arg(voter.member())
            .arg(direction.as_arg())
            .invoke_async(&mut *conn)
            .await?;
        let status = reply.first().and_then(value_str).unwrap_or("");
        let previous = reply
            .get(1)
            .and_then(value_str)
            .map(VoteDirection::from_arg)
            .unwrap_or(VoteDirection::None);
        match status {
            "missing" => Err(not_found(id)),
            "closed" => Err(AppError::VotingClosed),
            "same" => Ok(VoteOutcome {
                previous,
                changed: false,
            }),
            "changed" => Ok(VoteOutcome {
                previous,
                changed: true,
            }),
            other => Err(AppError::Internal(format!(
                "vote script answered {other:?}"
            ))),
        }
    }

    /// Adds and removes groups of an article; only its poster may.
    pub async fn set_groups(
        &self,
        id: ArticleId,
        caller: &UserName,
        add: &[GroupName],
        remove: &[GroupName],
    ) -> AppResult<()> {
        let mut conn = self.conn().await?;
        let mut invocation = scripts::SET_GROUPS.prepare_invoke();
        invocation.arg(id.0).arg(caller.member()).arg(add.len());
        for g in add.iter().chain(remove) {
            invocation.arg(g.as_str());
        }
        let status: String = invocation.invoke_async(&mut *conn).await?;
        match status.as_str() {
            "ok" => Ok(()),
            "missing" => Err(not_found(id)),
            "forbidden" => Err(AppError::Forbidden(
                "only the poster of an article can change its groups",
            )),
            other => Err(AppError::Internal(format!(
                "set-groups script answered {other:?}"
            ))),
        }
    }
}

pub fn not_found(id: ArticleId) -> AppError {
    AppError::NotFound(format!("no article with id {id}"))
}

fn members_to_ids(members: &[String]) -> Vec<ArticleId> {
    members
        .iter()
        .filter_map(|m| ArticleId::from_member(m))
        .collect()
}

/// Builds a record from `HGETALL`, `ZSCORE score:` and `SMEMBERS` replies.
/// Data written by other clients is read leniently: a missing field is
/// empty or zero rather than an error, so one odd article cannot break a page.
fn parse_article(
    id: ArticleId,
    hash: &Value,
    score: &Value,
    groups: &Value,
) -> Option<ArticleRecord> {
    let mut record = ArticleRecord {
        id,
        title: String::new(),
        link: String::new(),
        poster: String::new(),
        posted_at: 0.0,
        votes: 0,
        downvotes: 0,
        score: 0.0,
        groups: Vec::new(),
    };
    let mut seen = false;
    let mut visit = |field: &str, value: &Value| {
        seen = true;
        let text = value_str(value).unwrap_or("");
        match field {
            "title" => record.title = text.to_owned(),
            "link" => record.link = text.to_owned(),
            "poster" => record.poster = text.strip_prefix("user:").unwrap_or(text).to_owned(),
            "time" => record.posted_at = value_f64(value).unwrap_or(0.0),
            "votes" => record.votes = value_f64(value).unwrap_or(0.0) as i64,
            "downvotes" => record.downvotes = value_f64(value).unwrap_or(0.0) as i64,
            _ => {}
        }
    };
    match hash {
        Value::Array(items) => {
            for pair in items.chunks_exact(2) {
                if let Some(field) = value_str(&pair[0]) {
                    visit(field, &pair[1]);
                }
            }
        }
        Value::Map(pairs) => {
            for (k, v) in pairs {
                if let Some(field) = value_str(k) {
                    visit(field, v);
                }
            }
        }
        _ => {}
    }
    if !seen {
        return None;
    }
    record.score = value_f64(score).unwrap_or(record.posted_at);
    if let Value::Array(items) | Value::Set(items) = groups {
        record.groups = items
            .iter()
            .filter_map(value_str)
            .map(str::to_owned)
            .collect();
        record.groups.sort();
    }
    Some(record)
}
