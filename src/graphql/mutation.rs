//! Entry points that change data. Each one is a single atomic write in the
//! store (a Lua script), so a failed mutation leaves nothing half done.
//!
//! Every write is rate limited (per user, or per client address for
//! signUp, logIn and anonymous views); the counting happens inside the same
//! script as the write, so the limits hold across server instances and a
//! refused write changes nothing but its counter. Each resolver counts, so
//! a document with many aliased mutations counts every one of them.

use async_graphql::{Context, Object, Result, ID};

use super::types::{Article, AuthPayload, VoteDirection};
use super::{
    client_addr, invalidate_cache, invalidate_for_vote, loader, rate_limits, session, store,
};
use crate::auth::{new_token, token_hash, PasswordHasher};
use crate::domain::{ArticleId, ArticleTitle, GroupName, Link, Password, Slug, UserName};
use crate::error::AppError;
use crate::store::{LoginLimit, Viewer};

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
    /// Creates an account and logs it in. Limited per client address.
    async fn sign_up(
        &self,
        ctx: &Context<'_>,
        name: String,
        password: String,
    ) -> Result<AuthPayload> {
        let name = UserName::parse(&name)?;
        let password = Password::parse(&password)?;
        let (client, limit) = (client_addr(ctx), rate_limits(ctx).sign_up);
        store(ctx).sign_up_budget(client, limit).await?;
        let hash = ctx
            .data_unchecked::<PasswordHasher>()
            .hash(&password)
            .await?;
        let token = new_token();
        if !store(ctx)
            .create_user(&name, &hash, &token_hash(&token), client, limit)
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

    /// Logs in with a name and password, returning a new token. Attempts
    /// are limited per name and per client address.
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
        let name_limit = *ctx.data_unchecked::<LoginLimit>();
        store
            .login_attempt(&name, client_addr(ctx), name_limit, rate_limits(ctx).log_in)
            .await?;
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
        let id = store
            .post_article(&user, &title, &link, &groups, rate_limits(ctx).post)
            .await?;
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
        let changed = store
            .vote(id, &user, direction.into(), rate_limits(ctx).vote)
            .await?;
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
        store
            .rename_slug(id, &user, &slug, rate_limits(ctx).rename_slug)
            .await?;
        invalidate_cache(ctx);
        reload(ctx, id).await
    }

    /// Counts a view of an article (no login needed), once per viewer (the
    /// user, or the client address when not logged in) per view window; a
    /// repeated view returns the article without counting. Views do not
    /// invalidate cached pages: counts seen by anonymous readers may lag
    /// up to a second.
    async fn view_article(&self, ctx: &Context<'_>, id: ID) -> Result<Article> {
        let id = ArticleId::parse(&id, "id")?;
        let store = store(ctx);
        let viewer = match session(ctx).user(store).await? {
            Some(user) => Viewer::User(user),
            None => Viewer::Client(client_addr(ctx)),
        };
        let limits = rate_limits(ctx);
        store
            .view_article(id, &viewer, limits.view, limits.view_window_secs)
            .await?;
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
        store
            .set_groups(id, &user, &add, &remove, rate_limits(ctx).set_groups)
            .await?;
        invalidate_cache(ctx);
        reload(ctx, id).await
    }
}
