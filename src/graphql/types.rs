//! GraphQL output types and scalars.

use async_graphql::{
    ComplexObject, Context, Enum, InputValueError, InputValueResult, Object, Result, Scalar,
    ScalarType, SimpleObject, Value, ID,
};
use chrono::{SecondsFormat, TimeZone, Utc};

use crate::domain::{ArticleId, GroupName, PageRequest, UserName};
use crate::store::keys::Ranking;
use crate::store::{ArticleRecord, Ranked};

use super::{loader, record_deps, session, standings, store};

/// How a list of articles is ordered.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArticleOrder {
    /// Highest score first: post time + 432 points per net vote, so fresh and
    /// popular articles rise and old ones sink.
    Score,
    /// Most recently posted first.
    Newest,
}

impl From<ArticleOrder> for Ranking {
    fn from(order: ArticleOrder) -> Self {
        match order {
            ArticleOrder::Score => Ranking::Score,
            ArticleOrder::Newest => Ranking::Time,
        }
    }
}

/// A user's vote on an article.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
#[graphql(remote = "crate::store::VoteDirection")]
pub enum VoteDirection {
    /// An upvote: +432 score.
    Up,
    /// A downvote: -432 score.
    Down,
    /// No vote (voting NONE retracts one).
    None,
}

/// An instant, as an RFC 3339 string in UTC (`2026-11-22T18:47:58.123456Z`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DateTime(pub f64);

/// An instant as an RFC 3339 string in UTC, e.g. `2026-11-22T18:47:58.123456Z`.
#[Scalar(
    name = "DateTime",
    specified_by_url = "https://datatracker.ietf.org/doc/html/rfc3339"
)]
impl ScalarType for DateTime {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
                .map(|d| DateTime(d.timestamp_micros() as f64 / 1e6))
                .map_err(|_| InputValueError::custom("expected an RFC 3339 date-time")),
            _ => Err(InputValueError::expected_type(value)),
        }
    }

    fn to_value(&self) -> Value {
        let micros = (self.0 * 1e6).round() as i64;
        let text = Utc
            .timestamp_micros(micros)
            .single()
            .map(|d| d.to_rfc3339_opts(SecondsFormat::Micros, true))
            .unwrap_or_default();
        Value::String(text)
    }
}

pub struct Article(pub ArticleRecord);

/// Fields whose value depends on who asks (the session, or the client
/// address). A subscription that selects any of them runs once per
/// subscriber; any other runs once and is shared by all its subscribers
/// ([`super::shared`]). A new field that reads the caller belongs here, or
/// every subscriber of a shared stream would see the first one's answer
/// (they see an anonymous caller's); `shared.rs` has a test that lists
/// every field a subscription can reach, to make adding one a decision.
pub const CALLER_DEPENDENT_FIELDS: &[&str] = &["myVote"];

// Serial: every field is already in memory (only `poster`'s own fields may
// load anything, and those still batch across the articles of a list), so
// resolving the fields one after another skips async-graphql's per-object
// `FuturesUnordered` for nothing lost: +5 % on the uncached front page.
/// A link posted to the site.
#[Object(serial)]
impl Article {
    /// The numeric id (`"7"` for the Redis key `article:7`).
    async fn id(&self) -> ID {
        ID(self.0.id.to_string())
    }

    async fn title(&self) -> &str {
        &self.0.title
    }

    async fn link(&self) -> &str {
        &self.0.link
    }

    /// Who posted it.
    async fn poster(&self) -> User {
        User {
            name: self.0.poster.clone(),
        }
    }

    async fn posted_at(&self) -> DateTime {
        DateTime(self.0.posted_at)
    }

    /// Number of upvotes, the poster's own included.
    async fn votes(&self) -> i64 {
        self.0.votes
    }

    /// The ranking score: post time in Unix seconds + 432 × votes.
    async fn score(&self) -> f64 {
        self.0.score
    }

    /// The groups the article is in, sorted by name.
    async fn groups(&self) -> &[String] {
        &self.0.groups
    }

    /// Number of downvotes.
    async fn downvotes(&self) -> i64 {
        self.0.downvotes
    }

    /// The logged-in user's vote on this article; null when not logged in.
    /// Voters are forgotten when voting closes, so it is NONE after a week.
    // Depends on the caller: listed in `CALLER_DEPENDENT_FIELDS`.
    async fn my_vote(&self) -> Option<VoteDirection> {
        self.0.my_vote.map(Into::into)
    }

    /// Unique, URL-friendly handle derived from the title (`hello-world`,
    /// `hello-world-2`…). Articles written by other clients without one use
    /// their id.
    async fn slug(&self) -> String {
        self.0.slug.clone().unwrap_or_else(|| self.0.id.to_string())
    }

    /// How many times `viewArticle` counted it.
    async fn views(&self) -> i64 {
        self.0.views
    }
}

/// A topic with its own rankings. Any valid name is a group; one nobody
/// posted to is simply empty.
#[derive(SimpleObject)]
#[graphql(complex)]
pub struct Group {
    #[graphql(skip)]
    pub group: GroupName,
    pub name: String,
}

#[ComplexObject]
impl Group {
    /// The group's articles, ranked like the front page.
    async fn articles(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "ArticleOrder::Score")] order: ArticleOrder,
        #[graphql(default = 1)] page: i32,
        #[graphql(default = 25)] page_size: i32,
    ) -> Result<Vec<Article>> {
        let page = PageRequest::parse(page, page_size)?;
        let ids = async {
            store(ctx)
                .group_page(&self.group, order.into(), page)
                .await
                .map(unscored)
        };
        load_ranked(ctx, ids, Scope::Group(&self.group), order, page).await
    }

    /// Number of articles in the group.
    async fn article_count(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(store(ctx).group_count(&self.group).await? as i64)
    }
}

pub struct User {
    pub name: String,
}

impl From<UserName> for User {
    fn from(name: UserName) -> Self {
        User {
            name: name.as_str().to_owned(),
        }
    }
}

/// A member of the site.
#[Object]
impl User {
    async fn name(&self) -> &str {
        &self.name
    }

    /// Upvotes minus downvotes received on all of the user's articles
    /// (their own automatic upvote included).
    async fn karma(&self, ctx: &Context<'_>) -> Result<i64> {
        record_deps(ctx, |deps| deps.any_vote());
        Ok(standings(ctx)
            .load_one(self.name.clone())
            .await?
            .map_or(0, |s| s.karma))
    }

    /// Place on the karma leaderboard (1 is first); null before the user
    /// ever received a vote.
    async fn rank(&self, ctx: &Context<'_>) -> Result<Option<i64>> {
        record_deps(ctx, |deps| deps.any_vote());
        Ok(standings(ctx)
            .load_one(self.name.clone())
            .await?
            .and_then(|s| s.rank)
            .map(|r| r as i64))
    }

    /// The user's articles, ranked like the front page.
    async fn articles(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "ArticleOrder::Score")] order: ArticleOrder,
        #[graphql(default = 1)] page: i32,
        #[graphql(default = 25)] page_size: i32,
    ) -> Result<Vec<Article>> {
        let page = PageRequest::parse(page, page_size)?;
        let ids = async {
            store(ctx)
                .user_articles_page(&self.name, order.into(), page)
                .await
                .map(unscored)
        };
        load_ranked(ctx, ids, Scope::User, order, page).await
    }
}

/// A place on the karma leaderboard.
#[derive(SimpleObject)]
pub struct RankedUser {
    /// 1 is first; equal karma is ranked by who reached it first.
    pub rank: i64,
    pub user: User,
    pub karma: i64,
}

/// What signing up or logging in returns.
#[derive(SimpleObject)]
pub struct AuthPayload {
    /// Send it as `Authorization: Bearer <token>`; valid for 30 days or until `logOut`.
    pub token: String,
    pub user: User,
}

/// Which ranking a page comes from, for the response cache's record.
pub(crate) enum Scope<'a> {
    Site,
    Group(&'a GroupName),
    /// A user's own articles: any vote on them may reorder the page.
    User,
}

/// Reads a ranking page and loads its articles. The caller's session is
/// looked up while the range is read, so a logged-in page (with `myVote`)
/// still waits for two round trips in a row, not three.
pub(crate) async fn load_ranked(
    ctx: &Context<'_>,
    ids: impl std::future::Future<Output = crate::error::AppResult<Vec<Ranked>>>,
    scope: Scope<'_>,
    order: ArticleOrder,
    page: PageRequest,
) -> Result<Vec<Article>> {
    let (ids, viewer) = futures_util::join!(ids, session(ctx).user(store(ctx)));
    viewer?;
    let articles = load_in_order(ctx, ids?).await?;
    if order == ArticleOrder::Score {
        record_deps(ctx, |deps| {
            let scores: Vec<f64> = articles.iter().map(|a| a.0.score).collect();
            let full = articles.len() == page.page_size as usize;
            match scope {
                Scope::Site => deps.score_window(None, &scores, full),
                Scope::Group(g) => deps.score_window(Some(g.as_str()), &scores, full),
                Scope::User => deps.any_vote(),
            }
        });
    }
    Ok(articles)
}

/// Loads a ranking's articles, keeping its order and skipping ids whose
/// article vanished. The page already knows every id it needs, so it calls
/// the loader at once: going through the DataLoader would only add its
/// batching delay (1 ms) to every page. With batching off (the benchmark's
/// N+1 baseline) it makes one round trip per article, one after another.
pub(crate) async fn load_in_order(ctx: &Context<'_>, ids: Vec<Ranked>) -> Result<Vec<Article>> {
    let loader = loader(ctx).loader();
    if !ctx.data_unchecked::<super::Batching>().0 {
        let mut articles = Vec::with_capacity(ids.len());
        for entry in ids {
            if let Some(record) = loader.load_ranked(&[entry]).await?.remove(&entry.0) {
                articles.push(Article(record));
            }
        }
        return Ok(articles);
    }
    let mut found = loader.load_ranked(&ids).await?;
    Ok(ids
        .iter()
        .filter_map(|(id, _)| found.remove(id))
        .map(Article)
        .collect())
}

/// Page entries read without scores (groups, a user's articles, newest).
pub(crate) fn unscored(ids: Vec<ArticleId>) -> Vec<Ranked> {
    ids.into_iter().map(|id| (id, None)).collect()
}
