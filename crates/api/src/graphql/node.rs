//! Relay's Global Object Identification: the `Node` interface, and
//! `node`/`nodes`, which fetch objects again by their global ids through
//! the request's loaders (so the ids of one query share a batch).

use async_graphql::{Context, Interface, Result, ID};

use super::types::{Article, Group, User, GROUP_ID_PREFIX, USER_ID_PREFIX};
use super::RequestContext;
use crate::domain::{ArticleId, GroupName, UserName};
use crate::error::AppError;

/// An object `Query.node` fetches again by its `id`.
#[derive(Interface)]
#[graphql(field(
    name = "id",
    ty = "ID",
    desc = "Global id: an article's number, `user:<name>` or `group:<name>`."
))]
pub enum Node {
    Article(Article),
    User(User),
    Group(Group),
}

/// Most ids one `nodes` call takes, like a page's size.
pub(crate) const NODES_MAX: usize = 100;

/// The object with global id `id`; None when there is none, the id is
/// malformed, or the article is out of view as `Query.article` says. A
/// user's name may be in any case, as `logIn` takes it; a group, as
/// `Query.group` answers, is any valid name (one with no articles is
/// empty).
pub(super) async fn load(ctx: &Context<'_>, id: &str) -> Result<Option<Node>> {
    let context = RequestContext::of(ctx)?;
    if let Some(name) = id.strip_prefix(USER_ID_PREFIX) {
        let Ok(name) = UserName::parse(name) else {
            return Ok(None);
        };
        // Any case of the name: the user, with their own id.
        let user = context.user_named(&name).await?;
        return Ok(user.map(|user| Node::User(User::from(user))));
    }
    if let Some(name) = id.strip_prefix(GROUP_ID_PREFIX) {
        return Ok(GroupName::parse(name)
            .ok()
            .map(|g| Node::Group(Group::new(g))));
    }
    // Only the id as `Article.id` writes it: a refetch answers that id.
    match ArticleId::parse(id, "id") {
        Ok(article) if article.to_string() == id => {
            let article = context.visible(context.article(article).await?).await?;
            Ok(article.map(|a| Node::Article(Article(a))))
        }
        _ => Ok(None),
    }
}

/// The objects of `ids`, in order, each loaded like [`load`]: concurrently,
/// so each loader reads all of its ids in one batch.
pub(super) async fn load_many(ctx: &Context<'_>, ids: &[ID]) -> Result<Vec<Option<Node>>> {
    if ids.len() > NODES_MAX {
        return Err(
            AppError::bad_input("ids", format!("ids may list at most {NODES_MAX} ids")).into(),
        );
    }
    futures_util::future::try_join_all(ids.iter().map(|id| load(ctx, id))).await
}
