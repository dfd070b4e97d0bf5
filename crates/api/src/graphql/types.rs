//! GraphQL output types and scalars.

use async_graphql::{
    ComplexObject, Context, Enum, InputValueError, InputValueResult, Object, Result, Scalar,
    ScalarType, SimpleObject, Value, ID,
};
use chrono::{SecondsFormat, TimeZone, Utc};

use super::context::Feed;
use super::{ArticleList, RequestContext};
use crate::domain::{ArticleStatus, Period, Role};
use crate::domain::{GroupName, PageRequest, UserName};
use crate::store::{ArticleRecord, Order};

/// How a list of articles is ordered.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArticleOrder {
    /// Highest score first: post time + 432 points per net vote, so fresh and
    /// popular articles rise and old ones sink.
    Score,
    /// Most recently posted first.
    Newest,
    /// Posted within the last day, most net votes (upvotes − downvotes)
    /// first, newest first among equals.
    TopDay,
    /// Posted within the last 7 days, by net votes.
    TopWeek,
    /// Posted within the last 30 days, by net votes.
    TopMonth,
    /// Posted within the last 365 days, by net votes.
    TopYear,
    /// Every article, by net votes.
    TopAll,
}

impl From<ArticleOrder> for Order {
    fn from(order: ArticleOrder) -> Self {
        match order {
            ArticleOrder::Score => Order::Score,
            ArticleOrder::Newest => Order::Time,
            ArticleOrder::TopDay => Order::Top(Period::Day),
            ArticleOrder::TopWeek => Order::Top(Period::Week),
            ArticleOrder::TopMonth => Order::Top(Period::Month),
            ArticleOrder::TopYear => Order::Top(Period::Year),
            ArticleOrder::TopAll => Order::Top(Period::All),
        }
    }
}

/// How many edges a connection's page holds (`first`): 1–100.
pub(super) fn connection_size(first: i32) -> Result<usize> {
    Ok(crate::domain::parse_count("first", first, 100)?)
}

/// A page of a ranked list, as the `articles` fields read it.
pub(super) async fn ranked(
    ctx: &Context<'_>,
    list: ArticleList<'_>,
    order: ArticleOrder,
    page: i32,
    page_size: i32,
) -> Result<Vec<Article>> {
    let page = PageRequest::parse(page, page_size)?;
    let records = RequestContext::of(ctx)?
        .ranked(list, order.into(), page)
        .await?;
    Ok(records.into_iter().map(Article).collect())
}

/// A page of a feed, as a Relay connection.
pub(super) async fn feed(
    ctx: &Context<'_>,
    list: ArticleList<'_>,
    order: ArticleOrder,
    first: i32,
    after: Option<String>,
) -> Result<ArticleConnection> {
    let first = connection_size(first)?;
    let page = RequestContext::of(ctx)?
        .feed(list, order.into(), first, after.as_deref())
        .await?;
    Ok(page.into())
}

impl From<Feed> for ArticleConnection {
    fn from(page: Feed) -> Self {
        let end_cursor = page.edges.last().map(|(cursor, _)| cursor.clone());
        ArticleConnection {
            edges: page
                .edges
                .into_iter()
                .map(|(cursor, record)| ArticleEdge {
                    cursor,
                    node: Article(record),
                })
                .collect(),
            page_info: PageInfo {
                has_next_page: page.has_next,
                end_cursor,
            },
            total_count: page.total as i64,
        }
    }
}

// Shared by every connection: Relay and Apollo's `relayStylePagination`
// recognise this exact shape.
/// Where a page of a connection ends and whether there is more after it
/// (Relay's `PageInfo`, forward pagination only).
#[derive(SimpleObject, Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageInfo {
    /// True when a page requested with `after: endCursor` would not be empty.
    pub has_next_page: bool,
    /// The cursor of the last edge of this page; null when the page is empty.
    pub end_cursor: Option<String>,
}

/// A page of articles in a feed (Relay's connection).
#[derive(SimpleObject)]
pub struct ArticleConnection {
    pub edges: Vec<ArticleEdge>,
    pub page_info: PageInfo,
    /// Articles in the whole feed.
    pub total_count: i64,
}

/// An article and its position in the feed.
#[derive(SimpleObject)]
pub(crate) struct ArticleEdge {
    /// Opaque: pass it as `after` for the articles below this one.
    pub cursor: String,
    pub node: Article,
}

/// A user's vote on an article.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
#[graphql(remote = "crate::domain::VoteDirection")]
pub enum VoteDirection {
    /// An upvote: +432 score.
    Up,
    /// A downvote: -432 score.
    Down,
    /// No vote (voting NONE retracts one).
    #[graphql(name = "NONE")]
    Neither,
}

/// Unix seconds, sent as an RFC 3339 instant in UTC.
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
/// (`shared_subscriptions.rs`). A new field that reads the caller belongs here, or
/// every subscriber of a shared stream would see the first one's answer
/// (they see an anonymous caller's); `shared_subscriptions.rs` has a test that lists
/// every field a subscription can reach, to make adding one a decision.
pub(crate) const CALLER_DEPENDENT_FIELDS: &[&str] = &["myVote", "status", "flags"];

// Serial: every field is in memory (`poster`'s still batch), and
// async-graphql's per-object `FuturesUnordered` costs more than it overlaps.
/// A link posted to the site.
#[Object(serial)]
impl Article {
    /// The numeric id (`"7"` for the Redis key `article:7`).
    // Visible to `node.rs`: the `Node` interface resolves `id` through it.
    pub(super) async fn id(&self) -> ID {
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
    async fn my_vote(&self, ctx: &Context<'_>) -> Result<Option<VoteDirection>> {
        Ok(RequestContext::of(ctx)?
            .my_vote(ctx, &self.0)
            .map(Into::into))
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

    /// Where moderation left it, as public as the moderation log: `HIDDEN`
    /// and `REMOVED` to whoever sees it, `VISIBLE` to everyone else.
    /// `FLAGGED` (flags are not logged) only to moderators and its poster.
    // Depends on the caller: in `CALLER_DEPENDENT_FIELDS`.
    async fn status(&self, ctx: &Context<'_>) -> Result<Option<ArticleStatus>> {
        if self.0.status.is_out() {
            return Ok(Some(self.0.status));
        }
        let context = RequestContext::of(ctx)?;
        if !context.sees_moderation_of(&self.0).await? {
            return Ok(Some(ArticleStatus::Visible));
        }
        let (flags, _) = context.moderation_details(self.0.id).await?;
        Ok(Some(ArticleStatus::of(None, flags)))
    }

    /// Why a moderator removed it, as the moderation log says to everyone;
    /// null unless removed. Only its poster and moderators see a removed
    /// article.
    async fn removal_reason(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        if self.0.status != ArticleStatus::Removed {
            return Ok(None);
        }
        let context = RequestContext::of(ctx)?;
        Ok(context.moderation_details(self.0.id).await?.1)
    }

    /// Flags from distinct users; null for anyone but moderators.
    async fn flags(&self, ctx: &Context<'_>) -> Result<Option<i64>> {
        let context = RequestContext::of(ctx)?;
        if !context.moderates().await? {
            return Ok(None);
        }
        Ok(Some(context.moderation_details(self.0.id).await?.0))
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
    /// Its size as the group directory read it, which the directory's
    /// order follows; None: count it.
    #[graphql(skip)]
    pub size: Option<u64>,
}

impl Group {
    pub fn new(group: GroupName) -> Self {
        Self {
            name: group.as_str().to_owned(),
            group,
            size: None,
        }
    }
}

/// A page of the group directory (Relay's connection).
#[derive(SimpleObject)]
pub(crate) struct GroupConnection {
    pub edges: Vec<GroupEdge>,
    pub page_info: PageInfo,
    /// Groups in the directory.
    pub total_count: i64,
}

/// A group and its place in the directory.
#[derive(SimpleObject)]
pub(crate) struct GroupEdge {
    /// Opaque: pass it as `after` for the groups after this one.
    pub cursor: String,
    pub node: Group,
}

/// The global ids of users and groups (see `node.rs`): prefixed, so they
/// never equal an article's numeric id nor each other.
pub(crate) const USER_ID_PREFIX: &str = "user:";
pub(crate) const GROUP_ID_PREFIX: &str = "group:";

#[ComplexObject]
impl Group {
    /// Its global id, `group:<name>` (see `Query.node`).
    pub(super) async fn id(&self) -> ID {
        ID(format!("{GROUP_ID_PREFIX}{}", self.name))
    }

    /// The group's articles, ranked like the front page.
    async fn articles(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "ArticleOrder::Score")] order: ArticleOrder,
        #[graphql(default = 1)] page: i32,
        #[graphql(default = 25)] page_size: i32,
    ) -> Result<Vec<Article>> {
        ranked(ctx, ArticleList::Group(&self.group), order, page, page_size).await
    }

    /// The group's articles as a feed to scroll: cursors hold positions
    /// in the ranking, so votes that move other articles never make a page
    /// repeat or skip an article that did not move.
    async fn feed(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "ArticleOrder::Score")] order: ArticleOrder,
        #[graphql(default = 25)] first: i32,
        after: Option<String>,
    ) -> Result<ArticleConnection> {
        feed(ctx, ArticleList::Group(&self.group), order, first, after).await
    }

    /// Number of articles in the group.
    async fn article_count(&self, ctx: &Context<'_>) -> Result<i64> {
        if let Some(size) = self.size {
            return Ok(size as i64);
        }
        Ok(RequestContext::of(ctx)?.group_count(&self.group).await? as i64)
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
    /// Its global id, `user:<name>` (see `Query.node`).
    pub(super) async fn id(&self) -> ID {
        ID(format!("{USER_ID_PREFIX}{}", self.name))
    }

    async fn name(&self) -> &str {
        &self.name
    }

    /// Upvotes minus downvotes received on all of the user's articles
    /// (their own automatic upvote included).
    async fn karma(&self, ctx: &Context<'_>) -> Result<i64> {
        let standing = RequestContext::of(ctx)?.standing(&self.name).await?;
        Ok(standing.map_or(0, |s| s.karma))
    }

    /// Place on the karma leaderboard (1 is first); null before the user
    /// ever received a vote.
    async fn rank(&self, ctx: &Context<'_>) -> Result<Option<i64>> {
        let standing = RequestContext::of(ctx)?.standing(&self.name).await?;
        Ok(standing.and_then(|s| s.rank).map(|r| r as i64))
    }

    /// The user's articles, ranked like the front page.
    async fn articles(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "ArticleOrder::Score")] order: ArticleOrder,
        #[graphql(default = 1)] page: i32,
        #[graphql(default = 25)] page_size: i32,
    ) -> Result<Vec<Article>> {
        ranked(ctx, ArticleList::User(&self.name), order, page, page_size).await
    }

    /// MEMBER, MODERATOR or ADMIN.
    async fn role(&self, ctx: &Context<'_>) -> Result<Role> {
        Ok(RequestContext::of(ctx)?.account(&self.name).await?.role)
    }

    /// Whether the user is banned now; public, as the moderation log's
    /// bans are.
    async fn banned(&self, ctx: &Context<'_>) -> Result<bool> {
        Ok(self.ban(ctx).await?.is_some())
    }

    /// When the user's ban ends; null for a ban for good and when not
    /// banned.
    async fn banned_until(&self, ctx: &Context<'_>) -> Result<Option<DateTime>> {
        let until = self.ban(ctx).await?.flatten();
        Ok(until.map(|secs| DateTime(secs as f64)))
    }

    /// The user's articles as a feed to scroll (see `Query.feed`).
    async fn feed(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "ArticleOrder::Score")] order: ArticleOrder,
        #[graphql(default = 25)] first: i32,
        after: Option<String>,
    ) -> Result<ArticleConnection> {
        feed(ctx, ArticleList::User(&self.name), order, first, after).await
    }
}

impl User {
    /// The user's ban in force, with its end.
    async fn ban(&self, ctx: &Context<'_>) -> Result<Option<Option<u64>>> {
        let context = RequestContext::of(ctx)?;
        let now = chrono::Utc::now().timestamp() as u64;
        Ok(context.account(&self.name).await?.banned(now))
    }
}

/// A place on the karma leaderboard.
#[derive(SimpleObject)]
pub(crate) struct RankedUser {
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
