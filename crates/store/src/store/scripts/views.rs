//! Counting an article's views, once per viewer per view window
//! (`lua/view.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::RATE_LIMIT;
use super::{seconds, status, Lua, ScriptReply};
use crate::domain::ArticleId;
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::shards::Gate;
use crate::store::Conn;

/// What the view script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewReply {
    Limited(u64),
    Missing,
    /// The viewer was already counted in this view window.
    Repeated,
    Counted,
}

impl ScriptReply for ViewReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited(seconds(v)?)),
            ("missing", _) => Some(Self::Missing),
            ("repeat", _) => Some(Self::Repeated),
            ("counted", _) => Some(Self::Counted),
            _ => None,
        }
    }
}

/// Counts a view (HINCRBY on the article's `views` field) once per viewer
/// per view window: the viewer set remembers who was counted and expires
/// with the window, which the first counted view after it starts.
///
/// Only a view that would be counted uses the rate limit: a repeat writes
/// nothing (reading an article is not limited either), and checking the
/// set first means a reader who reopens the same article is never refused.
static VIEW: LazyLock<Lua<ViewReply>> =
    LazyLock::new(|| Lua::write("view", &[RATE_LIMIT, include_str!("../lua/view.lua")]));

/// Runs the view script for `viewer` (`user:<name>` or `client:<ip>`),
/// counted against `rate_key`'s `limit`.
pub async fn view(
    conn: &mut Conn,
    (at, id): (At, ArticleId),
    viewer: String,
    rate: Gate,
    view_window_secs: u64,
    moderates: bool,
) -> AppResult<ViewReply> {
    let mut invocation = VIEW.invocation();
    invocation
        .key(rate.key)
        .key(at.key(keys::article_viewers(id)))
        .key(at.key(keys::article(id)))
        .arg(viewer)
        .arg(rate.count)
        .arg(rate.window_secs)
        .arg(view_window_secs)
        .arg(if moderates { "1" } else { "" });
    VIEW.call(&invocation, conn).await
}
