//! Moderation in the schema: flags, removal, bans and roles (mutations),
//! the moderators' queue and the public moderation log (queries), and
//! `articleRemoved` (a subscription), merged into the roots; and what
//! `Article` and `User` show of moderation, to whom.

use async_graphql::{ComplexObject, Context, Object, Result, SimpleObject, Subscription, ID};
use futures_util::Stream;

use super::shared_subscriptions::receiving;
use super::types::{connection_size, Article, ArticleConnection, DateTime, PageInfo, User};
use super::RequestContext;
use crate::domain::{ArticleId, GroupName, ModAction, Role, UserName};
use crate::error::AppError;
use crate::pubsub::{next_wanted, ModeratedEvent};
use crate::store::{ModLogFilter, ModLogRecord, UserAction};

/// Longest reason a flag, removal or ban may give, in bytes.
const MAX_REASON_BYTES: usize = 500;

/// A reason as given: at most [`MAX_REASON_BYTES`]; a required one not
/// blank.
fn reason(raw: Option<String>, required: bool) -> Result<Option<String>> {
    let raw = raw.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
    match raw {
        None if required => Err(AppError::bad_input("reason", "give a reason").into()),
        Some(r) if r.len() > MAX_REASON_BYTES => Err(AppError::bad_input(
            "reason",
            format!("reason must be at most {MAX_REASON_BYTES} bytes"),
        )
        .into()),
        other => Ok(other),
    }
}

/// Removes (`remove`, a reason required) or restores an article.
async fn moderate_article(
    ctx: &Context<'_>,
    article_id: ID,
    remove: bool,
    reason: Option<String>,
) -> Result<Article> {
    let context = RequestContext::of(ctx)?;
    let id = ArticleId::parse(&article_id, "articleId")?;
    let reason = self::reason(reason, remove)?;
    let record = context.moderate_article(id, remove, reason.as_deref());
    Ok(Article(record.await?))
}

fn user_name(raw: &str) -> Result<UserName> {
    Ok(UserName::parse(raw).map_err(|_| AppError::NotFound(format!("no user named {raw:?}")))?)
}

#[derive(Default)]
pub(crate) struct ModerationQuery;

#[Object]
impl ModerationQuery {
    /// Flagged and hidden articles, most flags first; moderators only.
    async fn moderation_queue(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 25)] first: i32,
        after: Option<String>,
    ) -> Result<ArticleConnection> {
        let first = connection_size(first)?;
        let context = RequestContext::of(ctx)?;
        Ok(context
            .moderation_queue(first, after.as_deref())
            .await?
            .into())
    }

    /// The moderation log, newest first: every action, or those of one
    /// `action`, about one `user` (banned, unbanned, role set; the name in
    /// any case) or one article. Public, reasons and bans included, as
    /// `Article.removalReason` and `User.banned` are; `moderator` is shown
    /// to moderators only.
    async fn mod_log(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 25)] first: i32,
        after: Option<String>,
        action: Option<ModAction>,
        user: Option<String>,
        article_id: Option<ID>,
    ) -> Result<ModLogConnection> {
        let first = connection_size(first)?;
        let article = article_id
            .map(|id| ArticleId::parse(&id, "articleId"))
            .transpose()?;
        let filter = ModLogFilter {
            action,
            user,
            article,
        };
        let page = RequestContext::of(ctx)?
            .modlog(filter, first, after.as_deref())
            .await?;
        let end_cursor = page.entries.last().map(|(cursor, _)| cursor.clone());
        Ok(ModLogConnection {
            edges: page
                .entries
                .into_iter()
                .map(|(cursor, entry)| ModLogEdge {
                    cursor,
                    node: entry.into(),
                })
                .collect(),
            page_info: PageInfo {
                has_next_page: page.has_next,
                end_cursor,
            },
            total_count: page.total as i64,
        })
    }
}

#[derive(Default)]
pub(crate) struct ModerationMutation;

/// Moderation. Every action is written with its moderation log entry in one
/// step; an action that finds things already so writes and logs nothing.
#[Object]
impl ModerationMutation {
    /// Flags an article for the moderators, once per user (a repeat is a
    /// no-op); flags of accounts old enough and with karma enough hide it
    /// at `--flag-threshold`.
    async fn flag(
        &self,
        ctx: &Context<'_>,
        article_id: ID,
        reason: Option<String>,
    ) -> Result<Article> {
        let context = RequestContext::of(ctx)?;
        context.caller_required().await?;
        let id = ArticleId::parse(&article_id, "articleId")?;
        let reason = self::reason(reason, false)?;
        Ok(Article(context.flag(id, true, reason.as_deref()).await?))
    }

    /// Takes the caller's flag back (a no-op without one).
    async fn unflag(&self, ctx: &Context<'_>, article_id: ID) -> Result<Article> {
        let context = RequestContext::of(ctx)?;
        context.caller_required().await?;
        let id = ArticleId::parse(&article_id, "articleId")?;
        Ok(Article(context.flag(id, false, None).await?))
    }

    /// Takes an article out of every view (moderators).
    async fn remove_article(
        &self,
        ctx: &Context<'_>,
        article_id: ID,
        reason: String,
    ) -> Result<Article> {
        moderate_article(ctx, article_id, true, Some(reason)).await
    }

    /// Puts a removed or hidden article back everywhere with the votes and
    /// score it had, and clears its flags (moderators).
    async fn restore_article(
        &self,
        ctx: &Context<'_>,
        article_id: ID,
        reason: Option<String>,
    ) -> Result<Article> {
        moderate_article(ctx, article_id, false, reason).await
    }

    /// Bans a user until `until` (for good without it), ending their
    /// sessions everywhere; `removeArticles` removes each of their articles.
    /// Moderators ban members; only admins ban moderators and admins.
    async fn ban_user(
        &self,
        ctx: &Context<'_>,
        name: String,
        reason: String,
        until: Option<DateTime>,
        #[graphql(default)] remove_articles: bool,
    ) -> Result<User> {
        let name = user_name(&name)?;
        let reason = self::reason(Some(reason), true)?;
        let now = chrono::Utc::now().timestamp() as f64;
        let until = match until {
            Some(DateTime(at)) if at <= now => {
                return Err(AppError::bad_input("until", "until must be in the future").into())
            }
            other => other.map(|DateTime(at)| at.ceil() as u64),
        };
        let user = RequestContext::of(ctx)?.moderate_user(
            &name,
            UserAction::Ban(until),
            reason.as_deref(),
            remove_articles,
        );
        Ok(user.await?.into())
    }

    /// Lifts a user's ban (as banning, by role).
    async fn unban_user(
        &self,
        ctx: &Context<'_>,
        name: String,
        reason: Option<String>,
    ) -> Result<User> {
        let name = user_name(&name)?;
        let reason = self::reason(reason, false)?;
        let user = RequestContext::of(ctx)?.moderate_user(
            &name,
            UserAction::Unban,
            reason.as_deref(),
            false,
        );
        Ok(user.await?.into())
    }

    /// Gives a user a role (admins).
    async fn set_role(&self, ctx: &Context<'_>, name: String, role: Role) -> Result<User> {
        let name = user_name(&name)?;
        let reason = format!("set to {}", role.as_str());
        let user = RequestContext::of(ctx)?.moderate_user(
            &name,
            UserAction::SetRole(role),
            Some(&reason),
            false,
        );
        Ok(user.await?.into())
    }
}

#[derive(Default)]
pub(crate) struct ModerationSubscription;

#[Subscription]
impl ModerationSubscription {
    /// The id of each article removed or hidden from now on (through any
    /// instance), or only of those in `group`.
    async fn article_removed(
        &self,
        ctx: &Context<'_>,
        group: Option<String>,
    ) -> Result<impl Stream<Item = ID>> {
        let group = group
            .map(|g| GroupName::parse_field(&g, "group"))
            .transpose()?;
        let events = receiving(ctx, RequestContext::of(ctx)?.moderated_events());
        Ok(futures_util::stream::unfold(
            (events, group),
            |((mut receiver, uncounted), group)| async move {
                let event = next_wanted(&mut receiver, |event: &ModeratedEvent| {
                    event.removed
                        && group
                            .as_ref()
                            .is_none_or(|g| event.groups.iter().any(|e| e == g.as_str()))
                })
                .await?;
                let id = ID(event.id.clone().unwrap_or_default());
                Some((id, ((receiver, uncounted), group)))
            },
        ))
    }
}

/// A page of the moderation log (Relay's connection).
#[derive(SimpleObject)]
pub struct ModLogConnection {
    pub edges: Vec<ModLogEdge>,
    pub page_info: PageInfo,
    /// Entries matching the filters.
    pub total_count: i64,
}

/// An entry and its place in the log.
#[derive(SimpleObject)]
pub(crate) struct ModLogEdge {
    /// Opaque: pass it as `after` for the older entries.
    pub cursor: String,
    pub node: ModLogEntry,
}

/// One moderation action, written with it; never edited or deleted (the
/// oldest go past `--modlog-max-entries`).
#[derive(SimpleObject)]
#[graphql(complex)]
pub(crate) struct ModLogEntry {
    id: ID,
    at: DateTime,
    action: ModAction,
    /// Why, as the moderator said (a `SET_ROLE`'s names the role).
    reason: Option<String>,
    /// The user banned, unbanned or given a role.
    user: Option<User>,
    /// A ban's end; null for a ban for good and other actions.
    until: Option<DateTime>,
    #[graphql(skip)]
    record: ModLogRecord,
}

impl From<ModLogRecord> for ModLogEntry {
    fn from(record: ModLogRecord) -> Self {
        Self {
            id: ID(record.n.to_string()),
            at: DateTime(record.at),
            action: record.action,
            reason: record.reason.clone(),
            user: record.user.clone().map(|name| User { name }),
            until: record.until.map(|secs| DateTime(secs as f64)),
            record,
        }
    }
}

#[ComplexObject]
impl ModLogEntry {
    /// Who acted; shown to moderators only (null for everyone else, and
    /// for the command line and flags).
    async fn moderator(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        let shown = RequestContext::of(ctx)?.moderates().await?;
        let name = self.record.moderator.clone().filter(|_| shown);
        Ok(name.map(|name| User { name }))
    }

    /// The article acted on, as `article(id:)` shows it.
    async fn article(&self, ctx: &Context<'_>) -> Result<Option<Article>> {
        let Some(id) = self.record.article else {
            return Ok(None);
        };
        let context = RequestContext::of(ctx)?;
        let article = context.visible(context.article(id).await?).await?;
        Ok(article.map(Article))
    }
}
