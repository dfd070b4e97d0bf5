//! Posting an article: its id, a free slug, the poster's own upvote, and
//! its place in every ranking and group, in one script (`lua/post.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{GROUP_LIST, GROUP_SIZES, INDEX_TIME, KARMA, RATE_LIMIT, VOTE_INDEX};
use super::{group_keys, seconds, status, top_keys, Lua, Queuing, ScriptReply, GROUP_KEYS};
use super::{index_or_outbox, karma_or_outbox, or_outbox, via_outbox};
use crate::domain::{ArticleId, GroupName, Slug, UserName};
use crate::domain::{Period, Ranking};
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::shards::Gate;
use crate::store::{value_f64, value_str, Conn};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostReply {
    Limited(u64),
    Posted { id: ArticleId, slug: String },
}

impl ScriptReply for PostReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited(seconds(v)?)),
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
static POST: LazyLock<Lua<Queuing<PostReply>>> = LazyLock::new(|| {
    Lua::write(
        "post",
        &[
            KARMA,
            RATE_LIMIT,
            GROUP_LIST,
            GROUP_SIZES,
            INDEX_TIME,
            VOTE_INDEX,
            include_str!("../lua/post.lua"),
        ],
    )
});

/// Runs the post script on shard `at`, where the slug is claimed too (see
/// `Layout::of_slug`); `shards` spreads the ids (see `lua/post.lua`).
/// Answers the upvote queued for the poster's index on another shard, if
/// any.
pub async fn post(
    conn: &mut Conn,
    (at, shards): (At, usize),
    poster: &UserName,
    (title, link, stem): (&str, &str, &Slug),
    groups: &[GroupName],
    (rate, dedupe_secs): (Gate, u64),
) -> AppResult<Queuing<PostReply>> {
    let name = poster.as_str();
    let (index, index_queued) = index_or_outbox(at, poster);
    let mut invocation = POST.invocation();
    invocation
        .key(rate.key)
        .key(at.key(keys::ARTICLE_IDS))
        .key(at.key(keys::SCORE))
        .key(at.key(keys::TIME))
        .key(at.key(karma_or_outbox(at)))
        .key(at.key(keys::SLUGS))
        .key(at.key(keys::SLUG_SUFFIXES))
        .key(at.key(keys::user_articles(name, Ranking::Time)))
        .key(at.key(keys::user_articles(name, Ranking::Score)))
        .key(index);
    top_keys(&mut invocation, at);
    for period in Period::ALL {
        invocation.key(at.key(keys::user_top(name, period)));
    }
    invocation
        .key(at.key(or_outbox(at, keys::GROUPS_BY_SIZE)))
        .key(at.key(keys::user_posted(name, link)))
        .arg(keys::member(poster))
        .arg(title)
        .arg(link)
        .arg(stem.as_str())
        .arg(rate.count)
        .arg(rate.window_secs)
        .arg(at.key(keys::ARTICLE_PREFIX))
        .arg(at.key(keys::VOTED_PREFIX))
        .arg(keys::ARTICLE_GROUPS_SUFFIX)
        .arg(keys::POSTED_CHANNEL)
        .arg(keys::VOTING_WINDOW_SECS)
        .arg(keys::VOTE_SCORE)
        .arg(keys::TOP_STEP)
        .arg(GROUP_KEYS)
        .arg(dedupe_secs)
        .arg(shards)
        .arg(at.shard.0)
        .arg(via_outbox(at))
        .arg(index_queued);
    for g in groups {
        group_keys(&mut invocation, at, g);
        invocation.arg(g.as_str());
    }
    POST.call(&invocation, conn).await
}
