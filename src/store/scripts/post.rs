//! Posting an article: its id, a free slug, the poster's own upvote, and
//! its place in every ranking and group, in one script (`lua/post.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{GROUP_LIST, INDEX_TIME, KARMA, RATE_LIMIT, VOTE_INDEX};
use super::{group_keys, seconds, status, top_keys, Lua, ScriptReply, GROUP_KEYS};
use crate::domain::{ArticleId, GroupName, Slug, UserName};
use crate::domain::{Period, Ranking};
use crate::error::AppResult;
use crate::rate::PostLimits;
use crate::rate::RateAction;
use crate::store::keys;
use crate::store::{value_f64, value_str, Conn};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostReply {
    Limited { retry_after_secs: u64 },
    Posted { id: ArticleId, slug: String },
}

impl ScriptReply for PostReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited {
                retry_after_secs: seconds(v)?,
            }),
            ("posted", [id, slug]) => match value_f64(id)? {
                id if id >= 1.0 => Some(Self::Posted {
                    id: ArticleId(id as u64),
                    slug: value_str(slug)?.to_owned(),
                }),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Posts an article: hands out its id (`INCR article:`), a free slug and the
/// poster's own upvote (in `voted:<id>` and the poster's vote index), and
/// files it in the rankings and its groups.
///
/// The slug is the stem, or `stem-2`, `stem-3`… reserved with HSETNX on
/// `slug.to.id`, so concurrent posts never share one. The highest
/// suffix handed out per stem is kept in `slug:last-suffix`, so the
/// thousandth post of one title tries one slug, not a thousand.
static POST: LazyLock<Lua<PostReply>> = LazyLock::new(|| {
    Lua::write(
        "post",
        &[
            KARMA,
            RATE_LIMIT,
            GROUP_LIST,
            INDEX_TIME,
            VOTE_INDEX,
            include_str!("../lua/post.lua"),
        ],
    )
});

pub async fn post(
    conn: &mut Conn,
    poster: &UserName,
    title: &str,
    link: &str,
    stem: &Slug,
    groups: &[GroupName],
    limits: PostLimits,
) -> AppResult<PostReply> {
    let mut invocation = POST.invocation();
    invocation
        .key(keys::user_rate(poster.as_str(), RateAction::Post))
        .key(keys::ARTICLE_IDS)
        .key(keys::SCORE)
        .key(keys::TIME)
        .key(keys::KARMA)
        .key(keys::SLUGS)
        .key(keys::SLUG_SUFFIXES)
        .key(keys::user_articles(poster.as_str(), Ranking::Time))
        .key(keys::user_articles(poster.as_str(), Ranking::Score))
        .key(keys::user_votes(poster.as_str()));
    top_keys(&mut invocation);
    for period in Period::ALL {
        invocation.key(keys::user_top(poster.as_str(), period));
    }
    invocation
        .key(keys::GROUPS_BY_SIZE)
        .key(keys::user_posted(poster.as_str(), link))
        .arg(keys::member(poster))
        .arg(title)
        .arg(link)
        .arg(stem.as_str())
        .arg(limits.rate.count())
        .arg(limits.rate.window_secs())
        .arg(keys::ARTICLE_PREFIX)
        .arg(keys::VOTED_PREFIX)
        .arg(keys::ARTICLE_GROUPS_SUFFIX)
        .arg(keys::POSTED_CHANNEL)
        .arg(keys::VOTING_WINDOW_SECS)
        .arg(keys::VOTE_SCORE)
        .arg(keys::TOP_STEP)
        .arg(GROUP_KEYS)
        .arg(limits.dedupe_secs);
    for g in groups {
        group_keys(&mut invocation, g);
        invocation.arg(g.as_str());
    }
    POST.call(&invocation, conn).await
}
