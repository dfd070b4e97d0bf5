//! Read-only entry points.

use async_graphql::{Context, Object, Result, ID};

use super::node::{self, Node};
use super::types::{
    self, Article, ArticleConnection, ArticleOrder, Group, GroupConnection, GroupEdge, PageInfo,
    RankedUser, User,
};
use super::{ArticleList, RequestContext};
use crate::domain::{parse_count, ArticleId, GroupName};
use crate::store::GroupCursor;

#[derive(Default)]
pub(crate) struct QueryRoot;

#[Object]
impl QueryRoot {
    /// The site's ranked list of articles.
    async fn articles(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "ArticleOrder::Score")] order: ArticleOrder,
        #[graphql(default = 1)] page: i32,
        #[graphql(default = 25)] page_size: i32,
    ) -> Result<Vec<Article>> {
        types::ranked(ctx, ArticleList::Site, order, page, page_size).await
    }

    /// The site's articles as a feed to scroll (Relay connection): each
    /// edge's cursor is its article's position in the ranking (value and
    /// id), so the page after it starts right below that article however
    /// many votes moved others meanwhile.
    async fn feed(
        &self,
        ctx: &Context<'_>,
        #[graphql(default_with = "ArticleOrder::Score")] order: ArticleOrder,
        #[graphql(default = 25)] first: i32,
        after: Option<String>,
    ) -> Result<ArticleConnection> {
        types::feed(ctx, ArticleList::Site, order, first, after).await
    }

    /// Number of articles on the site.
    async fn article_count(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(RequestContext::of(ctx)?.article_count().await? as i64)
    }

    /// One article, or null when there is none with that id (or it was
    /// removed or hidden, but for its poster and moderators).
    async fn article(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Article>> {
        let id = ArticleId::parse(&id, "id")?;
        let context = RequestContext::of(ctx)?;
        Ok(context
            .visible(context.article(id).await?)
            .await?
            .map(Article))
    }

    /// A group by name; an unknown group is empty, not an error.
    async fn group(&self, name: String) -> Result<Group> {
        Ok(Group::new(GroupName::parse(&name)?))
    }

    /// Every group with articles, largest first (by name among equals), as
    /// a Relay connection. A cursor is a position (size and name): a group
    /// whose size did not change while a reader pages is never repeated
    /// nor skipped.
    async fn groups(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 25)] first: i32,
        after: Option<String>,
    ) -> Result<GroupConnection> {
        let first = types::connection_size(first)?;
        let page = RequestContext::of(ctx)?
            .groups(first, after.as_deref())
            .await?;
        let end_cursor = page.entries.last().map(|(_, _, p)| GroupCursor::encode(p));
        Ok(GroupConnection {
            edges: page
                .entries
                .into_iter()
                .map(|(group, size, position)| GroupEdge {
                    cursor: GroupCursor::encode(&position),
                    node: Group {
                        size: Some(size),
                        ..Group::new(group)
                    },
                })
                .collect(),
            page_info: PageInfo {
                has_next_page: page.has_next,
                end_cursor,
            },
            total_count: page.total as i64,
        })
    }

    /// The article with this slug, or null (as `article`).
    async fn article_by_slug(&self, ctx: &Context<'_>, slug: String) -> Result<Option<Article>> {
        let context = RequestContext::of(ctx)?;
        let record = context.article_by_slug(&slug).await?;
        Ok(context.visible(record).await?.map(Article))
    }

    /// The object with this global id (Relay's Global Object
    /// Identification), or null when there is none or the id is malformed.
    /// A user's name may be in any case; the user answers with their own id.
    async fn node(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Node>> {
        node::load(ctx, &id).await
    }

    /// The objects with these global ids, in order, null for each unknown
    /// or malformed one; at most 100 ids.
    async fn nodes(&self, ctx: &Context<'_>, ids: Vec<ID>) -> Result<Vec<Option<Node>>> {
        node::load_many(ctx, &ids).await
    }

    /// The karma leaderboard: users by karma, ties to whoever reached it first.
    async fn top_posters(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 10)] limit: i32,
    ) -> Result<Vec<RankedUser>> {
        let limit = parse_count("limit", limit, 100)?;
        let top = RequestContext::of(ctx)?.top_posters(limit).await?;
        Ok(top
            .into_iter()
            .enumerate()
            .map(|(i, (name, karma))| RankedUser {
                rank: i as i64 + 1,
                user: User { name },
                karma,
            })
            .collect())
    }

    /// The logged-in user, or null.
    async fn me(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let caller = RequestContext::of(ctx)?.caller().await?;
        Ok(caller.map(|caller| caller.name.into()))
    }
}
