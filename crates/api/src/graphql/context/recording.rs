//! What a response to cache shows, recorded while it runs: the data a vote
//! or a write can change ([`Deps`], for the response cache) and where it
//! shows each `myVote` ([`Holes`], for templates).

use std::sync::Arc;

use async_graphql::Context;

use crate::cache::{Deps, DepsCollector};
use crate::domain::VoteDirection;
use crate::store::ArticleRecord;
use crate::templates::Holes;

/// A request's record of what it shows; empty (recording nothing) for a
/// request whose response is not cached. A clone reads it once the request
/// ran (see [`RequestContext::attach`](super::RequestContext::attach)).
#[derive(Default, Clone)]
pub(crate) struct Recording {
    deps: Option<DepsCollector>,
    /// Set when the request computes a template.
    holes: Option<Arc<Holes>>,
}

impl Recording {
    /// A record that is kept: only for one request, as a connection's
    /// record would grow without end.
    pub(super) fn kept() -> Self {
        Self {
            deps: Some(DepsCollector::default()),
            holes: Some(Arc::default()),
        }
    }

    pub(super) fn record(&self, f: impl FnOnce(&mut Deps)) {
        if let Some(deps) = &self.deps {
            f(&mut deps.lock());
        }
    }

    /// A template cannot show who its caller is: it is computed for
    /// nobody and served to everyone.
    pub(super) fn shows_caller(&self) {
        if let Some(holes) = &self.holes {
            holes.mark_shows_caller();
        }
    }

    /// The caller's vote on `article`. A template leaves a hole there,
    /// filled per reader.
    pub(super) fn my_vote(
        &self,
        ctx: &Context<'_>,
        article: &ArticleRecord,
    ) -> Option<VoteDirection> {
        match &self.holes {
            Some(holes) => {
                holes.hole(ctx.path_node.as_ref(), article.id);
                None
            }
            None => article.my_vote,
        }
    }

    pub fn take(&self) -> Option<Deps> {
        self.deps
            .as_ref()
            .map(|deps| std::mem::take(&mut *deps.lock()))
    }

    pub fn holes(&self) -> Option<&Holes> {
        self.holes.as_deref()
    }
}
