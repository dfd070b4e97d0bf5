//! Entry points that change data. Each one is a single atomic write in the
//! store (a Lua script), so a failed mutation leaves nothing half done.

use async_graphql::{Context, Object, Result, ID};

use super::types::{Article, AuthPayload, VoteDirection};
use super::{invalidate_cache, invalidate_for_vote, loader, session, store};
use crate::auth::{new_token, token_hash, PasswordHasher};
use crate::domain::{ArticleId, ArticleTitle, GroupName, Link, Password, Slug, UserName};
use crate::error::AppError;
use crate::store::LoginLimit;

pub struct MutationRoot;

/// Reads an article after a write; it can only be gone if it was deleted
/// behind votegraph's back in between.
async fn reload(ctx: &Context<'_>, id: ArticleId) -> Result<Article> {
    match loader(ctx).load_one(id).await? {
        Some(record) => Ok(Article(record)),
        None => Err(crate::store::not_found(id).into()),
    }
}

/// Writes: accounts, posts, votes, groups, slugs and views. A mutation that
/// fails writes nothing.
#[Object(name = "Mutation")]
impl MutationRoot {
    /// Creates an account and logs it in.
    async fn sign_up(
        &self,
        ctx: &Context<'_>,
        name: String,
        password: String,
    ) -> Result<AuthPayload> {
        let name = UserName::parse(&name)?;
        let password = Password::parse(&password)?;
        let hash = ctx
            .data_unchecked::<PasswordHasher>()
            .hash(&password)
            .await?;
        let token = new_token();
        if !store(ctx)
            .create_user(&name, &hash, &token_hash(&token))
            .await?
        {
            return Err(AppError::bad_input(
                "name",
                format!("the name {:?} is already taken", name.as_str()),
            )
            .into());
        }
        Ok(AuthPayload {
            token,
            user: name.into(),
        })
    }

    /// Logs in with a name and password, returning a new token.
    async fn log_in(
        &self,
        ctx: &Context<'_>,
        name: String,
        password: String,
    ) -> Result<AuthPayload> {
        let invalid = || AppError::Unauthenticated("invalid name or password");
        // Malformed credentials cannot match an account; answering as for a
        // wrong password does not reveal which rule they broke.
        let (Ok(name), Ok(password)) = (UserName::parse(&name), Password::parse(&password)) else {
            return Err(invalid().into());
        };
        let store = store(ctx);
        let limit = *ctx.data_unchecked::<LoginLimit>();
        if let Some(retry_after_secs) = store.login_attempt(&name, limit).await? {
            return Err(AppError::RateLimited { retry_after_secs }.into());
        }
        let stored = store.password_hash(&name).await?;
        if !ctx
            .data_unchecked::<PasswordHasher>()
            .verify(&password, stored)
            .await?
        {
            return Err(invalid().into());
        }
        let token = new_token();
        store.create_session(&token_hash(&token), &name).await?;
        Ok(AuthPayload {
            token,
            user: name.into(),
        })
    }

    /// Revokes the token the request was sent with. True when a session was
    /// revoked, false when the token was already invalid or absent.
    async fn log_out(&self, ctx: &Context<'_>) -> Result<bool> {
        match session(ctx).token() {
            Some(token) => Ok(store(ctx).delete_session(&token_hash(token)).await?),
            None => Ok(false),
        }
    }

    /// Posts a link; the poster's own upvote is counted at once.
    async fn post(
        &self,
        ctx: &Context<'_>,
        title: String,
        link: String,
        #[graphql(default)] groups: Vec<String>,
    ) -> Result<Article> {
        let store = store(ctx);
        let user = session(ctx).require_user(store).await?;
        let title = ArticleTitle::parse(&title)?;
        let link = Link::parse(&link)?;
        let groups = GroupName::parse_many(&groups, "groups")?;
        let id = store.post_article(&user, &title, &link, &groups).await?;
        invalidate_cache(ctx);
        reload(ctx, id).await
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
        let store = store(ctx);
        let user = session(ctx).require_user(store).await?;
        let id = ArticleId::parse(&article_id, "articleId")?;
        let changed = store.vote(id, &user, direction.into()).await?;
        let article = reload(ctx, id).await?;
        if changed {
            invalidate_for_vote(ctx, &article.0);
        }
        Ok(article)
    }

    /// Gives an article a new slug (poster only); `SLUG_TAKEN` when another
    /// article has it. The old slug is freed.
    async fn rename_slug(
        &self,
        ctx: &Context<'_>,
        article_id: ID,
        slug: String,
    ) -> Result<Article> {
        let store = store(ctx);
        let user = session(ctx).require_user(store).await?;
        let id = ArticleId::parse(&article_id, "articleId")?;
        let slug = Slug::parse(&slug)?;
        store.rename_slug(id, &user, &slug).await?;
        invalidate_cache(ctx);
        reload(ctx, id).await
    }

    /// Counts one view of an article (no login needed). Views do not
    /// invalidate cached pages: counts seen by anonymous readers may lag
    /// up to a second.
    async fn view_article(&self, ctx: &Context<'_>, id: ID) -> Result<Article> {
        let id = ArticleId::parse(&id, "id")?;
        store(ctx).view_article(id).await?;
        reload(ctx, id).await
    }

    /// Adds the article to groups and removes it from others; only its poster may.
    async fn set_groups(
        &self,
        ctx: &Context<'_>,
        article_id: ID,
        #[graphql(default)] add: Vec<String>,
        #[graphql(default)] remove: Vec<String>,
    ) -> Result<Article> {
        let store = store(ctx);
        let user = session(ctx).require_user(store).await?;
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
        store.set_groups(id, &user, &add, &remove).await?;
        invalidate_cache(ctx);
        reload(ctx, id).await
    }
}
