//! Moderation through the request context: who may see and do what, each
//! action one write in the store (its log entry included), then the
//! response cache dropped (other instances drop theirs on the moderation's
//! event).

use std::sync::Arc;

use async_graphql::Result;
use tokio::sync::broadcast;

use super::{ArticleList, Feed, RequestContext};
use crate::domain::{ArticleId, Role, UserName};
use crate::error::AppError;
use crate::pubsub::ModeratedEvent;
use crate::rate::RateLimit;
use crate::store::{
    no_user, Account, Actor, ArticleRecord, Caller, ModLogFilter, ModLogRecord, Order, Page,
    UserAction,
};

impl RequestContext {
    /// The caller, who must be an admin or (`needed` a moderator) a
    /// moderator; `FORBIDDEN` names the role needed.
    async fn in_role(&self, needed: Role) -> Result<Caller> {
        let caller = self.caller_required().await?;
        let (allowed, message) = match needed {
            Role::Admin => (caller.role == Role::Admin, "this needs the ADMIN role"),
            _ => (
                caller.role.moderates(),
                "this needs the MODERATOR or ADMIN role",
            ),
        };
        if !allowed {
            return Err(AppError::Forbidden(message).into());
        }
        Ok(caller)
    }

    /// Whether the caller moderates (false when anonymous).
    pub(crate) async fn moderates(&self) -> Result<bool> {
        Ok(self.caller().await?.is_some_and(|c| c.role.moderates()))
    }

    /// Whether the caller sees `article` taken out, and whether it is
    /// flagged: its poster and moderators do.
    pub(crate) async fn sees_moderation_of(&self, article: &ArticleRecord) -> Result<bool> {
        Ok(self
            .caller()
            .await?
            .is_some_and(|c| c.role.moderates() || c.name.as_str() == article.poster))
    }

    /// An article's flag count and removal reason, from the primary (so a
    /// moderation mutation's answer shows its own write).
    pub(crate) async fn moderation_details(&self, id: ArticleId) -> Result<(i64, Option<String>)> {
        Ok(self.routing.primary.moderation_details(id).await?)
    }

    /// `article` as `article(id:)` shows it: a removed or hidden one only
    /// to its poster and to moderators. Only those read the caller.
    pub async fn visible(&self, article: Option<ArticleRecord>) -> Result<Option<ArticleRecord>> {
        match article {
            Some(a) if a.status.is_out() && !self.sees_moderation_of(&a).await? => Ok(None),
            other => Ok(other),
        }
    }

    /// Flags `id` as the caller, or takes the flag back.
    pub async fn flag(
        &self,
        id: ArticleId,
        flagging: bool,
        reason: Option<&str>,
    ) -> Result<ArticleRecord> {
        let caller = self.caller_required().await?;
        let actor = acting(&caller, reason, self.app.rates.flag);
        self.routing.primary.flag(&actor, id, flagging).await?;
        self.invalidate_all();
        self.reload(id).await
    }

    /// Removes (`remove`) or restores `id`.
    pub(crate) async fn moderate_article(
        &self,
        id: ArticleId,
        remove: bool,
        reason: Option<&str>,
    ) -> Result<ArticleRecord> {
        let moderator = self.in_role(Role::Moderator).await?;
        let actor = acting(&moderator, reason, self.app.rates.moderate);
        let store = &self.routing.primary;
        store.moderate_article(&actor, id, remove).await?;
        self.invalidate_all();
        self.reload(id).await
    }

    /// Bans, unbans or sets the role of the user `name` (any case); a ban
    /// with `remove_articles` removes each of their articles too.
    pub async fn moderate_user(
        &self,
        name: &UserName,
        action: UserAction,
        reason: Option<&str>,
        remove_articles: bool,
    ) -> Result<UserName> {
        let needed = match action {
            UserAction::SetRole(_) => Role::Admin,
            _ => Role::Moderator,
        };
        let caller = self.in_role(needed).await?;
        let store = &self.routing.primary;
        let (user, _) = store.account(name).await?.ok_or_else(|| no_user(name))?;
        let actor = acting(&caller, reason, self.app.rates.moderate);
        store.moderate_user(&actor, &user, action).await?;
        if remove_articles {
            store.remove_articles_of(&actor, &user).await?;
        }
        self.invalidate_all();
        Ok(user)
    }

    /// A page of the moderators' queue, with its articles.
    pub(crate) async fn moderation_queue(&self, first: usize, after: Option<&str>) -> Result<Feed> {
        self.in_role(Role::Moderator).await?;
        self.feed(ArticleList::Queue, Order::Score, first, after)
            .await
    }

    /// A page of the moderation log; `filter.user` in any case, as
    /// `logIn` takes it (no such user: no entries). Moderation drops cached
    /// responses, so the page records nothing.
    pub async fn modlog(
        &self,
        mut filter: ModLogFilter,
        first: usize,
        after: Option<&str>,
    ) -> Result<Page<ModLogRecord>> {
        if let Some(typed) = filter.user.take() {
            let user = match UserName::parse(&typed) {
                Ok(name) => self.user_named(&name).await?,
                Err(_) => None,
            };
            let Some(user) = user else {
                return Ok(Page {
                    entries: Vec::new(),
                    has_next: false,
                    total: 0,
                });
            };
            filter.user = Some(user.as_str().to_owned());
        }
        Ok(self.routing.primary.modlog(&filter, after, first).await?)
    }

    /// A user's role and ban (batched).
    pub async fn account(&self, name: &str) -> Result<Account> {
        let account = self.routing.accounts.load_one(name.to_owned()).await?;
        Ok(account.unwrap_or_default())
    }

    /// Moderations from now on, from the process' one pub/sub connection.
    pub(crate) fn moderated_events(&self) -> broadcast::Receiver<Arc<ModeratedEvent>> {
        self.app.pubsub.subscribe_moderated()
    }
}

/// `caller` acting for `reason`, counted against `limit`.
fn acting<'a>(caller: &'a Caller, reason: Option<&'a str>, limit: RateLimit) -> Actor<'a> {
    Actor {
        name: Some(&caller.name),
        role: caller.role,
        reason,
        limit: Some(limit),
    }
}
