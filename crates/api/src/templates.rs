//! Logged-in pages from shared templates (docs/api.md, "Cached pages"): a
//! logged-in response differs from an anonymous one only in `myVote`, so it
//! is computed once with a hole for each, and filled per reader. A document
//! that reads who the caller is (`me`) runs whole.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use async_graphql::context::{QueryPathNode, QueryPathSegment};
use async_graphql::{Name, Value};
use bytes::{BufMut, Bytes, BytesMut};

use crate::domain::ArticleId;
use crate::domain::VoteDirection;

/// One step of a response path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(Name),
    Index(usize),
}

/// Where a `myVote` goes in a response, and for which article.
#[derive(Debug)]
struct Hole {
    path: Vec<Step>,
    id: ArticleId,
}

/// What a template's computation learned: its holes, and whether it read
/// the caller (then it cannot be a template).
#[derive(Debug, Default)]
pub(crate) struct Holes {
    holes: Mutex<Vec<Hole>>,
    shows_caller: AtomicBool,
}

impl Holes {
    /// A `myVote` of article `id` at `path`.
    pub fn hole(&self, path: Option<&QueryPathNode<'_>>, id: ArticleId) {
        let mut steps: Vec<Step> = path
            .into_iter()
            .flat_map(|node| std::iter::once(node).chain(node.parents()))
            .map(|node| match node.segment {
                QueryPathSegment::Name(name) => Step::Key(Name::new(name)),
                QueryPathSegment::Index(i) => Step::Index(i),
            })
            .collect();
        steps.reverse();
        self.holes.lock().push(Hole { path: steps, id });
    }

    /// The response read who the caller is.
    pub(crate) fn mark_shows_caller(&self) {
        self.shows_caller.store(true, Ordering::Relaxed);
    }

    /// Whether the response read who the caller is.
    pub(crate) fn shows_caller(&self) -> bool {
        self.shows_caller.load(Ordering::Relaxed)
    }

    /// The template of `response`; None (a bug) when a hole's path is not
    /// in the data, `response` then left as it was.
    pub fn template(&self, response: &mut async_graphql::Response) -> Option<Template> {
        let holes = std::mem::take(&mut *self.holes.lock());
        let nonce = nonce();
        let mut replaced = Vec::with_capacity(holes.len());
        let mut placed = true;
        for (i, hole) in holes.iter().enumerate() {
            match slot(&mut response.data, &hole.path) {
                Some(value) => {
                    let marker = Value::String(format!("{nonce}{i}"));
                    replaced.push((i, std::mem::replace(value, marker)));
                }
                None => placed = false,
            }
        }
        let template = placed
            .then(|| serde_json::to_vec(&response).ok())
            .flatten()
            .and_then(|marked| Template::from_marked(&marked, &holes, nonce));
        if template.is_none() {
            for (i, value) in replaced.into_iter().rev() {
                if let Some(slot) = slot(&mut response.data, &holes[i].path) {
                    *slot = value;
                }
            }
        }
        template
    }
}

/// A response body with a `null` in place of every `myVote`, and where
/// each hole is, for which article.
#[derive(Debug)]
pub(crate) struct Template {
    body: Bytes,
    /// The holes, by ascending byte offset.
    slots: Box<[Slot]>,
}

/// A hole's place in a template's body: where its `null` starts.
#[derive(Debug, Clone, Copy)]
struct Slot {
    at: usize,
    id: ArticleId,
}

const NULL: &[u8] = b"null";

impl Template {
    /// Finds the markers `{nonce}{i}` (as JSON strings) that stand for the
    /// holes in a serialised response, and puts `null`s in their place.
    fn from_marked(marked: &[u8], holes: &[Hole], nonce: &str) -> Option<Self> {
        // The nonce starts with a control character, so serde_json wrote
        // it escaped; nothing a user wrote can forge it (it is random).
        let escaped = serde_json::to_string(nonce).ok()?;
        let opening = &escaped.as_bytes()[..escaped.len() - 1];
        let mut body = BytesMut::with_capacity(marked.len());
        let mut found = vec![false; holes.len()];
        let mut slots = Vec::with_capacity(holes.len());
        let mut rest = marked;
        while let Some(at) = find(rest, opening) {
            body.put_slice(&rest[..at]);
            let after = &rest[at + opening.len()..];
            let end = after.iter().position(|&b| b == b'"')?;
            let i: usize = std::str::from_utf8(&after[..end]).ok()?.parse().ok()?;
            if std::mem::replace(found.get_mut(i)?, true) {
                return None;
            }
            slots.push(Slot {
                at: body.len(),
                id: holes[i].id,
            });
            body.put_slice(NULL);
            rest = &after[end + 1..];
        }
        body.put_slice(rest);
        if found.iter().any(|f| !f) {
            return None;
        }
        Some(Self {
            body: body.freeze(),
            slots: slots.into_boxed_slice(),
        })
    }

    /// The articles whose votes fill the holes, in the holes' order.
    pub fn ids(&self) -> Vec<ArticleId> {
        self.slots.iter().map(|slot| slot.id).collect()
    }

    /// The body with no reader: every `myVote` null, as anonymous readers
    /// (and unknown or expired tokens) get it.
    pub fn anonymous(&self) -> Bytes {
        self.body.clone()
    }

    /// The body for a reader whose votes on [`Template::ids`] are `votes`.
    pub fn fill(&self, votes: &[VoteDirection]) -> Bytes {
        let mut out = BytesMut::with_capacity(self.body.len() + 2 * votes.len());
        let mut from = 0;
        for (slot, vote) in self.slots.iter().zip(votes) {
            out.put_slice(&self.body[from..slot.at]);
            out.put_slice(match vote {
                VoteDirection::Up => b"\"UP\"",
                VoteDirection::Down => b"\"DOWN\"",
                VoteDirection::Neither => b"\"NONE\"",
            });
            from = slot.at + NULL.len();
        }
        out.put_slice(&self.body[from..]);
        out.freeze()
    }

    /// Bytes held, for the cache's budget.
    pub fn size(&self) -> usize {
        self.body.len() + self.slots.len() * std::mem::size_of::<Slot>()
    }
}

fn slot<'a>(data: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(data, |value, step| match (value, step) {
            (Value::Object(map), Step::Key(key)) => map.get_mut(key),
            (Value::List(items), Step::Index(i)) => items.get_mut(*i),
            _ => None,
        })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A marker prefix no response can contain by chance or by a user's
/// doing: a control character and 128 random bits, drawn once per process.
fn nonce() -> &'static str {
    static NONCE: OnceLock<String> = OnceLock::new();
    NONCE.get_or_init(|| format!("\u{1}{:032x}:", rand::random::<u128>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(json: serde_json::Value) -> async_graphql::Response {
        async_graphql::Response::new(Value::from_json(json).unwrap())
    }

    fn path(steps: &[&str]) -> Vec<Step> {
        steps
            .iter()
            .map(|s| match s.parse() {
                Ok(i) => Step::Index(i),
                Err(_) => Step::Key(Name::new(s)),
            })
            .collect()
    }

    fn holes(list: Vec<(Vec<Step>, u64)>) -> Holes {
        let holes = Holes::default();
        *holes.holes.lock() = list
            .into_iter()
            .map(|(path, id)| Hole {
                path,
                id: ArticleId(id),
            })
            .collect();
        holes
    }

    #[test]
    fn fills_each_hole_with_its_articles_vote() {
        let mut r = response(serde_json::json!({
            "articles": [
                {"id": "1", "title": "a \"quoted\" title", "myVote": null},
                {"id": "2", "title": "null", "myVote": null},
            ],
            "again": {"myVote": null},
        }));
        let h = holes(vec![
            (path(&["articles", "1", "myVote"]), 2),
            (path(&["articles", "0", "myVote"]), 1),
            (path(&["again", "myVote"]), 1),
        ]);
        let t = h.template(&mut r).unwrap();
        // In the body's order (`again` serialises first), not the holes'.
        assert_eq!(t.ids(), vec![ArticleId(1), ArticleId(1), ArticleId(2)]);
        let body = t.fill(&[VoteDirection::Up, VoteDirection::Up, VoteDirection::Down]);
        let got: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            got,
            serde_json::json!({"data": {
                "articles": [
                    {"id": "1", "title": "a \"quoted\" title", "myVote": "UP"},
                    {"id": "2", "title": "null", "myVote": "DOWN"},
                ],
                "again": {"myVote": "UP"},
            }})
        );
        let anonymous: serde_json::Value = serde_json::from_slice(&t.anonymous()).unwrap();
        assert_eq!(
            anonymous["data"]["articles"][1]["myVote"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn a_title_that_looks_like_a_marker_is_left_alone() {
        // A user cannot know the process' nonce; a title spelling the
        // marker's shape without it stays text.
        let mut r = response(serde_json::json!({
            "a": {"title": "\u{1}0", "myVote": null},
        }));
        let h = holes(vec![(path(&["a", "myVote"]), 5)]);
        let t = h.template(&mut r).unwrap();
        let body = t.fill(&[VoteDirection::Neither]);
        let got: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(got["data"]["a"]["title"], "\u{1}0");
        assert_eq!(got["data"]["a"]["myVote"], "NONE");
    }

    #[test]
    fn a_hole_outside_the_data_is_no_template_and_leaves_the_response_alone() {
        let json = serde_json::json!({"a": {"myVote": null, "votes": 3}});
        let mut r = response(json.clone());
        let h = holes(vec![
            (path(&["a", "myVote"]), 5),
            (path(&["b", "myVote"]), 5),
        ]);
        assert!(h.template(&mut r).is_none());
        assert_eq!(r.data, Value::from_json(json).unwrap());
    }
}
