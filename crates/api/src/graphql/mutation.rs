//! Entry points that change data, each a single atomic write (a Lua
//! script), so a failed mutation leaves nothing half done. Each resolver is
//! rate limited inside its script: limits hold across instances, a refused
//! write changes only its counter, and aliased mutations each count.

use async_graphql::{Context, Object, Result, ID};

use super::context::invalid_credentials;
use super::types::{Article, AuthPayload, VoteDirection};
use super::RequestContext;
use crate::domain::{ArticleId, ArticleTitle, GroupName, Link, Password, Slug, UserName};
use crate::error::AppError;

#[derive(Default)]
pub(crate) struct MutationRoot;

// Described as a whole by `Mutation` (`graphql/mod.rs`).
#[Object]
impl MutationRoot {
    /// Creates an account and logs it in. Limited per client address.
    async fn sign_up(
        &self,
        ctx: &Context<'_>,
        name: String,
        password: String,
    ) -> Result<AuthPayload> {
        let name = UserName::parse(&name)?;
        let password = Password::parse(&password)?;
        let token = RequestContext::of(ctx)?
            .accounts()
            .sign_up(&name, &password)
            .await?;
        Ok(AuthPayload {
            token,
            user: name.into(),
        })
    }

    /// Logs in with a name and password, returning a new token. Attempts
    /// are limited per name and per client address.
    async fn log_in(
        &self,
        ctx: &Context<'_>,
        name: String,
        password: String,
    ) -> Result<AuthPayload> {
        // Malformed credentials cannot match an account; answering as for a
        // wrong password does not reveal which rule they broke.
        let (Ok(name), Ok(password)) = (UserName::parse(&name), Password::parse(&password)) else {
            return Err(invalid_credentials().into());
        };
        let token = RequestContext::of(ctx)?
            .accounts()
            .log_in(&name, &password)
            .await?;
        Ok(AuthPayload {
            token,
            user: name.into(),
        })
    }

    /// Revokes the token the request was sent with. True when a session was
    /// revoked, false when the token was already invalid or absent.
    async fn log_out(&self, ctx: &Context<'_>) -> Result<bool> {
        RequestContext::of(ctx)?.accounts().log_out().await
    }

    /// Posts a link; the poster's own upvote is counted at once. Posting a
    /// link one already posted within `--post-dedupe-secs` (a day) returns
    /// that article unchanged.
    async fn post(
        &self,
        ctx: &Context<'_>,
        title: String,
        link: String,
        #[graphql(default)] groups: Vec<String>,
    ) -> Result<Article> {
        let context = RequestContext::of(ctx)?;
        // Logged in first: an anonymous caller learns that before any
        // complaint about the input.
        context.caller_required().await?;
        let title = ArticleTitle::parse(&title)?;
        let link = Link::parse(&link)?;
        let groups = GroupName::parse_many(&groups, "groups")?;
        Ok(Article(context.post(&title, &link, &groups).await?))
    }

    /// Sets the caller's vote: UP (the default), DOWN, or NONE to retract.
    /// Voting the same way twice is a no-op; switching moves the vote.
    /// Voting closes one week after posting.
    async fn vote(
        &self,
        ctx: &Context<'_>,
        article_id: ID,
        #[graphql(default_with = "VoteDirection::Up")] direction: VoteDirection,
    ) -> Result<Article> {
        let context = RequestContext::of(ctx)?;
        context.caller_required().await?;
        let id = ArticleId::parse(&article_id, "articleId")?;
        Ok(Article(context.vote(id, direction.into()).await?))
    }

    /// Gives an article a new slug (poster only); `SLUG_TAKEN` when another
    /// article has it. The old slug is freed.
    async fn rename_slug(
        &self,
        ctx: &Context<'_>,
        article_id: ID,
        slug: String,
    ) -> Result<Article> {
        let context = RequestContext::of(ctx)?;
        context.caller_required().await?;
        let id = ArticleId::parse(&article_id, "articleId")?;
        let slug = Slug::parse(&slug)?;
        Ok(Article(context.rename_slug(id, &slug).await?))
    }

    /// Counts a view of an article (no login needed), once per viewer (the
    /// user, or the client address when not logged in) per view window; a
    /// repeated view returns the article without counting. Views do not
    /// invalidate cached pages: counts seen by anonymous readers may lag
    /// up to a second.
    async fn view_article(&self, ctx: &Context<'_>, id: ID) -> Result<Article> {
        let id = ArticleId::parse(&id, "id")?;
        Ok(Article(RequestContext::of(ctx)?.view(id).await?))
    }

    /// Adds the article to groups and removes it from others; only its poster may.
    async fn set_groups(
        &self,
        ctx: &Context<'_>,
        article_id: ID,
        #[graphql(default)] add: Vec<String>,
        #[graphql(default)] remove: Vec<String>,
    ) -> Result<Article> {
        let context = RequestContext::of(ctx)?;
        context.caller_required().await?;
        let id = ArticleId::parse(&article_id, "articleId")?;
        let add = GroupName::parse_many(&add, "add")?;
        let remove = GroupName::parse_many(&remove, "remove")?;
        if let Some(both) = add.iter().find(|g| remove.contains(g)) {
            return Err(AppError::bad_input(
                "remove",
                format!("group {:?} is both added and removed", both.as_str()),
            )
            .into());
        }
        Ok(Article(context.set_groups(id, &add, &remove).await?))
    }
}
