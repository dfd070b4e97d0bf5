//! Moderation through the request context: who may see and do what, each
//! action one write in the store (its log entry included), then the
//! response cache dropped (other instances drop theirs on the moderation's
//! event).

use std::sync::Arc;

use async_graphql::Result;
use tokio::sync::broadcast;

use super::{Feed, RequestContext};
use crate::domain::{ArticleId, Role, UserName};
use crate::error::AppError;
use crate::pubsub::ModeratedEvent;
use crate::store::{
    no_user, Account, ArticleRecord, Caller, ModLogFilter, ModLogRecord, Page, UserAction,
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
    pub async fn moderates(&self) -> Result<bool> {
        Ok(self.caller().await?.is_some_and(|c| c.role.moderates()))
    }

    /// Whether the caller sees what moderation did to `article`: its
    /// poster and moderators do.
    pub async fn sees_moderation_of(&self, article: &ArticleRecord) -> Result<bool> {
        Ok(self
            .caller()
            .await?
            .is_some_and(|c| c.role.moderates() || c.name.as_str() == article.poster))
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
        let limit = self.app.rates.flag;
        let store = &self.routing.primary;
        store.flag(&caller, id, flagging, reason, limit).await?;
        self.invalidate_all();
        self.reload(id).await
    }

    /// Removes (`remove`) or restores `id`.
    pub async fn moderate_article(
        &self,
        id: ArticleId,
        remove: bool,
        reason: Option<&str>,
    ) -> Result<ArticleRecord> {
        let moderator = self.in_role(Role::Moderator).await?;
        let limit = Some(self.app.rates.moderate);
        let store = &self.routing.primary;
        store
            .moderate_article(&moderator.name, id, remove, reason, limit)
            .await?;
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
        let user = match store.account(name).await? {
            Some((user, _)) => user,
            None => return Err(no_user(name).into()),
        };
        let limit = Some(self.app.rates.moderate);
        store
            .moderate_user(Some(&caller), &user, action, reason, limit)
            .await?;
        if remove_articles {
            let reason = reason.unwrap_or_default();
            store
                .remove_articles_of(&caller.name, &user, reason)
                .await?;
        }
        self.invalidate_all();
        Ok(user)
    }

    /// A page of the moderators' queue, with its articles.
    pub async fn moderation_queue(&self, first: usize, after: Option<&str>) -> Result<Feed> {
        self.in_role(Role::Moderator).await?;
        let store = &self.routing.primary;
        let page = store.moderation_queue(after, first).await?;
        let ids: Vec<_> = page.entries.iter().map(|(_, id)| (*id, None)).collect();
        let mut found = self.routing.articles.loader().load_ranked(&ids).await?;
        let edges = page.entries.into_iter();
        Ok(Feed {
            edges: edges
                .filter_map(|(c, id)| Some((c, found.remove(&id)?)))
                .collect(),
            has_next: page.has_next,
            total: page.total,
        })
    }

    /// A page of the moderation log. Moderation drops cached responses,
    /// so the page records nothing.
    pub async fn modlog(
        &self,
        filter: &ModLogFilter,
        first: usize,
        after: Option<&str>,
    ) -> Result<Page<ModLogRecord>> {
        Ok(self.routing.primary.modlog(filter, after, first).await?)
    }

    /// A user's role and ban (batched).
    pub async fn account(&self, name: &str) -> Result<Account> {
        let account = self.routing.accounts.load_one(name.to_owned()).await?;
        Ok(account.unwrap_or_default())
    }

    /// Moderations from now on, from the process' one pub/sub connection.
    pub fn moderated_events(&self) -> broadcast::Receiver<Arc<ModeratedEvent>> {
        self.app.pubsub.subscribe_moderated()
    }
}
