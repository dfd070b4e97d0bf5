//! Subscriptions run once per distinct meaning and shared by all their
//! subscribers (docs/api.md, "Shared subscriptions"): one resolution and one
//! serialisation per event, however many subscribe.
//!
//! A subscription is shared when it selects none of
//! [`CALLER_DEPENDENT_FIELDS`]; its key is the operation's [`canonical`]
//! print, name and variables (as JSON with sorted keys). One task per key
//! runs it as an anonymous caller and fans its payloads out over a broadcast
//! of [`CAPACITY`]. The last subscriber out stops it; one that fails to
//! start leaves the registry first, so the next subscriber sees its own
//! error. Past `max_streams` keys, or [`MAX_KEY_BYTES`], it runs unshared.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use async_graphql::parser::types::{ExecutableDocument, OperationType, Selection};
use async_graphql::{Context, Executor, Request, Response};
use futures_util::stream::{BoxStream, StreamExt};
use tokio::sync::broadcast;
use tokio::task::AbortHandle;

use super::limits::{select_operation, selections};
pub(crate) use super::types::CALLER_DEPENDENT_FIELDS;
use super::{canonical, Api, RequestContext};
use crate::auth::Session;
use crate::client_addr::ClientAddr;
use crate::pubsub::{next_wanted, PubSub, Uncounted};

/// Payloads (each one `Arc` for all) a shared stream keeps for its slowest
/// subscriber; one further behind skips the oldest.
pub(crate) const CAPACITY: usize = 1024;

/// Longest key that is shared: what the registry keeps is bounded.
pub(crate) const MAX_KEY_BYTES: usize = 8 * 1024;

/// How many of the largest streams `/health` lists.
const LISTED_STREAMS: usize = 10;

/// The process-wide registry of shared subscription streams; cheap to clone.
#[derive(Clone)]
pub struct SharedStreams(Arc<Registry>);

struct Registry {
    /// By key: the operation's canonical print and its variables.
    streams: Mutex<HashMap<Arc<str>, Arc<Entry>>>,
    max_streams: usize,
    pubsub: PubSub,
    /// Subscriptions run unshared because `max_streams` streams ran.
    unshared_at_limit: AtomicU64,
}

struct Entry {
    key: Arc<str>,
    state: Mutex<EntryState>,
}

struct EntryState {
    /// Where joiners subscribe; `None` once the entry left the registry,
    /// so its channel closes when the task ends.
    sender: Option<broadcast::Sender<Arc<str>>>,
    subscribers: usize,
    /// Whether the resolver has subscribed to score events: from then on
    /// the subscribers are counted as client subscriptions.
    live: bool,
    task: Option<AbortHandle>,
}

impl SharedStreams {
    /// An empty registry of at most `max_streams` streams (0: nothing is
    /// shared).
    pub fn new(max_streams: usize, pubsub: PubSub) -> Self {
        Self(Arc::new(Registry {
            streams: Mutex::new(HashMap::new()),
            max_streams,
            pubsub,
            unshared_at_limit: AtomicU64::new(0),
        }))
    }

    /// The shared payloads of `request`, joining or starting its stream, or
    /// the request back for the caller to run when it is not to be shared.
    pub fn join(
        &self,
        api: &Api,
        request: Request,
    ) -> Result<BoxStream<'static, Arc<str>>, Box<Request>> {
        let registry = &self.0;
        let key = (registry.max_streams > 0).then(|| shareable_key(api, &request));
        let Some(key) = key.flatten() else {
            return Err(Box::new(request));
        };
        let mut streams = registry.streams.lock();
        if let Some(entry) = streams.get(&key).cloned() {
            if let Some(receiver) = entry.join(&registry.pubsub) {
                drop(streams);
                return Ok(self.payloads(receiver, entry));
            }
        }
        if streams.len() >= registry.max_streams {
            drop(streams);
            registry.unshared_at_limit.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                max = registry.max_streams,
                "shared subscription streams at their limit; running one unshared"
            );
            return Err(Box::new(request));
        }
        let (sender, receiver) = broadcast::channel(CAPACITY);
        let entry = Arc::new(Entry {
            key: key.clone(),
            state: Mutex::new(EntryState {
                sender: Some(sender.clone()),
                subscribers: 1,
                live: false,
                task: None,
            }),
        });
        streams.insert(key, entry.clone());
        // Nobody in particular: no session, and an address no client has.
        let anonymous = ClientAddr::from(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let mut data =
            RequestContext::new(&api.state, Session::from_authorization(None), anonymous)
                .into_connection_data();
        data.insert(SharedExecution {
            entry: entry.clone(),
            pubsub: registry.pubsub.clone(),
        });
        let responses = api.execute_stream(request, Some(Arc::new(data)));
        let task = tokio::spawn(run(responses, sender, entry.clone(), self.clone()));
        entry.state.lock().task = Some(task.abort_handle());
        drop(streams);
        Ok(self.payloads(receiver, entry))
    }

    /// A subscriber's payloads; dropping the stream leaves the entry.
    fn payloads(
        &self,
        receiver: broadcast::Receiver<Arc<str>>,
        entry: Arc<Entry>,
    ) -> BoxStream<'static, Arc<str>> {
        // The receiver is dropped before the membership (tuple order), so
        // the last one out finds the channel with no receivers.
        let member = Member {
            registry: self.clone(),
            entry,
        };
        futures_util::stream::unfold((receiver, member), |(mut receiver, member)| async move {
            let payload = next_wanted(&mut receiver, |_| true).await?;
            Some((payload, (receiver, member)))
        })
        .boxed()
    }

    /// Takes `entry` out of the registry and closes it to joiners.
    fn detach(&self, entry: &Arc<Entry>) {
        forget(&mut self.0.streams.lock(), entry);
        entry.state.lock().sender = None;
    }

    /// Streams and subscribers, for `/health`.
    pub fn stats(&self) -> serde_json::Value {
        let registry = &self.0;
        let mut counts: Vec<usize> = registry
            .streams
            .lock()
            .values()
            .map(|entry| entry.state.lock().subscribers)
            .collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let subscribers: usize = counts.iter().sum();
        let streams = counts.len();
        counts.truncate(LISTED_STREAMS);
        serde_json::json!({
            "streams": streams,
            "subscribers": subscribers,
            "largest": counts,
            "maxStreams": registry.max_streams,
            "unsharedAtLimit": registry.unshared_at_limit.load(Ordering::Relaxed),
        })
    }
}

impl Entry {
    /// A receiver for one more subscriber, unless the entry is closed.
    fn join(&self, pubsub: &PubSub) -> Option<broadcast::Receiver<Arc<str>>> {
        let mut state = self.state.lock();
        let receiver = state.sender.as_ref()?.subscribe();
        state.subscribers += 1;
        if state.live {
            pubsub.add_shared(1);
        }
        Some(receiver)
    }
}

/// One subscriber's membership of a shared stream; dropping it leaves, and
/// the last one out stops the task and removes the entry.
struct Member {
    registry: SharedStreams,
    entry: Arc<Entry>,
}

impl Drop for Member {
    fn drop(&mut self) {
        let registry = &self.registry.0;
        let mut streams = registry.streams.lock();
        let mut state = self.entry.state.lock();
        state.subscribers = state.subscribers.saturating_sub(1);
        if state.live {
            registry.pubsub.remove_shared(1);
        }
        if state.subscribers == 0 {
            forget(&mut streams, &self.entry);
            state.sender = None;
            if let Some(task) = state.task.take() {
                task.abort();
            }
        }
    }
}

/// Takes `entry` out of `streams` if it is still the one under its key.
fn forget(streams: &mut HashMap<Arc<str>, Arc<Entry>>, entry: &Arc<Entry>) {
    if streams
        .get(&entry.key)
        .is_some_and(|current| Arc::ptr_eq(current, entry))
    {
        streams.remove(&entry.key);
    }
}

/// Request data of a shared execution: the resolver subscribes through it,
/// so its subscribers are counted, not its receiver.
pub(crate) struct SharedExecution {
    entry: Arc<Entry>,
    pubsub: PubSub,
}

/// A subscription resolver's `receiver`, with what keeps it out of the
/// count in a shared execution (whose subscribers are counted instead):
/// the [`Uncounted`] comes second, to be dropped after it.
pub fn receiving<T>(
    ctx: &Context<'_>,
    receiver: broadcast::Receiver<T>,
) -> (broadcast::Receiver<T>, Option<Uncounted>) {
    let shared = ctx.data_opt::<SharedExecution>();
    (receiver, shared.map(SharedExecution::go_live))
}

impl SharedExecution {
    /// From now on the subscribers are counted as served by this execution.
    fn go_live(&self) -> Uncounted {
        let uncounted = self.pubsub.uncounted();
        let mut state = self.entry.state.lock();
        if !state.live {
            state.live = true;
            self.pubsub.add_shared(state.subscribers);
        }
        uncounted
    }
}

/// The shared execution: each response serialised once for every
/// subscriber. A response before the resolver subscribed means it failed
/// to start: the entry leaves the registry, so later subscribers run it
/// afresh rather than join a stream that ends without telling them why.
async fn run(
    mut responses: BoxStream<'static, Response>,
    sender: broadcast::Sender<Arc<str>>,
    entry: Arc<Entry>,
    registry: SharedStreams,
) {
    while let Some(response) = responses.next().await {
        if !entry.state.lock().live {
            registry.detach(&entry);
        }
        let payload = match serde_json::to_string(&response) {
            Ok(text) => Arc::<str>::from(text),
            Err(e) => {
                tracing::error!(error = %e, "serialising a shared subscription response");
                continue;
            }
        };
        if sender.send(payload).is_err() {
            break;
        }
    }
    registry.detach(&entry);
}

/// The key of `request` if it is to be shared.
fn shareable_key(api: &Api, request: &Request) -> Option<Arc<str>> {
    let checked = api.guard.check(request).ok()??;
    if checked.operation != OperationType::Subscription || !caller_independent(&checked.document) {
        return None;
    }
    key(request, &checked.document)
}

/// The key of `request` (see the module doc); None past [`MAX_KEY_BYTES`].
fn key(request: &Request, document: &ExecutableDocument) -> Option<Arc<str>> {
    let name = request.operation_name.as_deref();
    let operation = &select_operation(document, name)?.1.node;
    let mut key = canonical::operation(document, operation, name, MAX_KEY_BYTES)?;
    let mut variables = serde_json::to_value(&request.variables).ok()?;
    variables.sort_all_objects();
    // A print escapes control characters, so the separator is its own.
    key.push('\0');
    key.push_str(&variables.to_string());
    (key.len() <= MAX_KEY_BYTES).then(|| key.into())
}

/// Whether no field of `document` (used or not) is one of
/// [`CALLER_DEPENDENT_FIELDS`], whatever its type: conservative, and no
/// schema lookup.
fn caller_independent(document: &ExecutableDocument) -> bool {
    !selections(document).any(|selection| {
        let Selection::Field(field) = selection else {
            return false;
        };
        CALLER_DEPENDENT_FIELDS.contains(&field.node.name.node.as_str())
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use async_graphql::parser::types::{TypeKind, TypeSystemDefinition};
    use async_graphql::Variables;

    use super::*;

    fn independent(query: &str) -> bool {
        caller_independent(&async_graphql::parser::parse_query(query).unwrap())
    }

    #[test]
    fn a_caller_dependent_field_anywhere_keeps_a_document_unshared() {
        assert!(independent(
            "subscription { scoreChanged { votes article { id title } } }"
        ));
        for query in [
            "subscription { scoreChanged { article { myVote } } }",
            "subscription { scoreChanged { article { mine: myVote } } }",
            "subscription { scoreChanged { article { ... on Article { myVote } } } }",
            "subscription { scoreChanged { article { ...A } } } fragment A on Article { myVote }",
            // Even in a fragment or operation the selected one does not use.
            "subscription { scoreChanged { votes } } fragment A on Article { myVote }",
            "subscription S { scoreChanged { votes } } query Q { article(id: \"1\") { myVote } }",
        ] {
            assert!(!independent(query), "{query}");
        }
    }

    fn request(query: &str, variables: serde_json::Value) -> Request {
        Request::new(query).variables(Variables::from_json(variables))
    }

    fn key_of(request: &Request) -> Option<Arc<str>> {
        let document = async_graphql::parser::parse_query(&request.query).unwrap();
        key(request, &document)
    }

    #[test]
    fn keys_ignore_the_order_of_variables_but_not_their_values() {
        let query =
            "subscription($a: ID, $g: String) { scoreChanged(articleId: $a, group: $g) { votes } }";
        let one = key_of(&request(query, serde_json::json!({ "a": "1", "g": "x" }))).unwrap();
        let same = key_of(&request(query, serde_json::json!({ "g": "x", "a": "1" }))).unwrap();
        let other = key_of(&request(query, serde_json::json!({ "a": "2", "g": "x" }))).unwrap();
        assert_eq!(one, same);
        assert_ne!(one, other);
        let named =
            key_of(&request(query, serde_json::json!({ "a": "1", "g": "x" })).operation_name("S"));
        assert_ne!(Some(one), named);
    }

    #[test]
    fn keys_past_the_size_limit_are_not_shared() {
        let query = "subscription($g: String) { scoreChanged(group: $g) { votes } }";
        let fits = "g".repeat(MAX_KEY_BYTES - query.len() - 16);
        assert!(key_of(&request(query, serde_json::json!({ "g": fits }))).is_some());
        let long = "g".repeat(MAX_KEY_BYTES);
        assert!(key_of(&request(query, serde_json::json!({ "g": long }))).is_none());
    }

    /// Every field a subscription can reach, reviewed for whether it
    /// depends on the caller.
    const REVIEWED: &[&str] = &[
        "Article.downvotes",
        "Article.flags",
        "Article.groups",
        "Article.id",
        "Article.link",
        "Article.myVote",
        "Article.postedAt",
        "Article.poster",
        "Article.removalReason",
        "Article.score",
        "Article.slug",
        "Article.status",
        "Article.title",
        "Article.views",
        "Article.votes",
        // A feed page and its cursors are the same for every caller (the
        // articles' `myVote` is reviewed on its own).
        "ArticleConnection.edges",
        "ArticleConnection.pageInfo",
        "ArticleConnection.totalCount",
        "ArticleEdge.cursor",
        "ArticleEdge.node",
        "PageInfo.endCursor",
        "PageInfo.hasNextPage",
        "ScoreChange.article",
        "ScoreChange.at",
        "ScoreChange.downvotes",
        "ScoreChange.score",
        "ScoreChange.votes",
        "Subscription.articlePosted",
        "Subscription.articleRemoved",
        "Subscription.scoreChanged",
        "User.articles",
        "User.banned",
        "User.bannedUntil",
        "User.feed",
        "User.id",
        "User.karma",
        "User.name",
        "User.rank",
        "User.role",
    ];

    /// A field added where a subscription reaches fails this test until
    /// someone decides whether it depends on the caller: one left out of
    /// `CALLER_DEPENDENT_FIELDS` would show subscribers an anonymous answer.
    #[test]
    fn every_field_a_subscription_reaches_was_reviewed() {
        let sdl = crate::graphql::sdl();
        let document = async_graphql::parser::parse_schema(&sdl).unwrap();
        let mut objects = HashMap::new();
        for definition in &document.definitions {
            if let TypeSystemDefinition::Type(ty) = definition {
                if let TypeKind::Object(object) = &ty.node.kind {
                    objects.insert(ty.node.name.node.to_string(), &object.fields);
                }
            }
        }
        let mut reached = BTreeSet::new();
        let mut seen = BTreeSet::from(["Subscription".to_owned()]);
        let mut pending = vec!["Subscription".to_owned()];
        while let Some(type_name) = pending.pop() {
            for field in objects[&type_name].iter() {
                reached.insert(format!("{type_name}.{}", field.node.name.node));
                let (target, _) = crate::graphql::limits::unwrap_type(&field.node.ty.node);
                if objects.contains_key(&target) && seen.insert(target.clone()) {
                    pending.push(target);
                }
            }
        }
        let reviewed: BTreeSet<String> = REVIEWED.iter().map(|f| f.to_string()).collect();
        assert_eq!(
            reached, reviewed,
            "the fields a subscription reaches changed: decide whether each new one depends on the caller (then add it to CALLER_DEPENDENT_FIELDS) and update REVIEWED"
        );
        for field in CALLER_DEPENDENT_FIELDS {
            assert!(
                reached.iter().any(|r| r.ends_with(&format!(".{field}"))),
                "{field} is not in the schema"
            );
        }
    }
}
