//! Which primary serves each shard of the cluster layout.
//!
//! With more shards than primaries, a primary holds several shards' slices.
//! A read of every slice ([`Store::scatter`], the merged rankings) sends a
//! primary one pipeline with all of its shards' commands, not one request
//! per shard, so a page still costs each primary one request per round
//! trip. redis-rs keeps its slot map to itself and refuses a pipeline whose
//! keys span slots, so the map is read here (`CLUSTER SLOTS`): at start,
//! and again when a pipeline sent by it fails (a slot moved, a primary
//! failed over), at most once a second.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::Value;

use super::keys::{Layout, Shard};
use super::shard_tags;
use super::{value_f64, value_str, Store};
use crate::error::AppResult;

/// How soon the map may be read again.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Each shard's primary, as the cluster last said.
#[derive(Default)]
pub(crate) struct Nodes {
    /// Shard → the primary's `host:port`; None until read, and from a
    /// failed pipeline until read again.
    map: RwLock<Option<HashMap<Shard, String>>>,
    /// When the map was last asked for.
    asked: Mutex<Option<Instant>>,
}

/// Commands that go together in one pipeline: their places in a call, and
/// the slot whose primary they go to (None: redis-rs routes them by their
/// keys, which then share one slot).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub slot: Option<u16>,
    pub commands: Vec<usize>,
}

impl Nodes {
    /// The commands for `shards` (one shard each) grouped by the primary
    /// that serves them, each group routed by one of its shards' slots;
    /// None while the map is unknown or misses a shard.
    pub fn by_node(&self, layout: Layout, shards: &[Shard]) -> Option<Vec<Group>> {
        let map = self.map.read();
        let map = map.as_ref()?;
        let mut groups: Vec<(&str, Group)> = Vec::new();
        for (i, shard) in shards.iter().enumerate() {
            let node = map.get(shard)?;
            match groups.iter_mut().find(|(n, _)| n == node) {
                Some((_, group)) => group.commands.push(i),
                None => groups.push((
                    node,
                    Group {
                        slot: Some(shard_tags::key_slot(&layout.on(*shard, ""))),
                        commands: vec![i],
                    },
                )),
            }
        }
        Some(groups.into_iter().map(|(_, group)| group).collect())
    }

    /// Drops the map: until it is read again, commands go per shard.
    pub fn forget(&self) {
        *self.map.write() = None;
    }

    /// Whether the map may be read now; if so, the next ask waits a while.
    fn due(&self) -> bool {
        let mut asked = self.asked.lock();
        if asked.is_some_and(|at| at.elapsed() < REFRESH_EVERY) {
            return false;
        }
        *asked = Some(Instant::now());
        true
    }
}

/// The commands for `shards` grouped by shard, routed by their keys.
pub(crate) fn by_shard(shards: &[Shard]) -> Vec<Group> {
    let mut groups: Vec<(Shard, Group)> = Vec::new();
    for (i, &shard) in shards.iter().enumerate() {
        match groups.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, group)) => group.commands.push(i),
            None => groups.push((
                shard,
                Group {
                    slot: None,
                    commands: vec![i],
                },
            )),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

impl Store {
    /// Reads which primary serves each shard (the cluster layout only),
    /// unless it was read within the last second.
    pub async fn find_nodes(&self) {
        if self.layout.is_cluster() && self.nodes.due() {
            self.read_nodes().await;
        }
    }

    /// [`Store::find_nodes`] in the background, so no request waits for it.
    pub(crate) fn find_nodes_soon(&self) {
        if self.layout.is_cluster() && self.nodes.due() {
            let store = self.clone();
            tokio::spawn(async move { store.read_nodes().await });
        }
    }

    async fn read_nodes(&self) {
        let read = async {
            let mut conn = self.conn().await?;
            let reply: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut conn)
                .await?;
            AppResult::Ok(primaries(self.layout, &reply))
        };
        match read.await {
            Ok(map) => *self.nodes.map.write() = Some(map),
            Err(e) => {
                tracing::warn!(error = %e, "reading the cluster's slots failed; shards are read one request each until it works")
            }
        }
    }
}

/// Each shard's primary in a `CLUSTER SLOTS` reply; a shard whose slot no
/// range covers is left out.
fn primaries(layout: Layout, reply: &Value) -> HashMap<Shard, String> {
    let ranges = ranges(reply);
    layout
        .shards()
        .filter_map(|shard| {
            let slot = shard_tags::key_slot(&layout.on(shard, ""));
            let (_, node) = ranges.iter().find(|(slots, _)| slots.contains(&slot))?;
            Some((shard, node.clone()))
        })
        .collect()
}

/// `CLUSTER SLOTS`' ranges: `[first, last, [host, port, …], replicas…]`.
fn ranges(reply: &Value) -> Vec<(RangeInclusive<u16>, String)> {
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    let range = |entry: &Value| {
        let Value::Array(parts) = entry else {
            return None;
        };
        let [first, last, Value::Array(primary), ..] = parts.as_slice() else {
            return None;
        };
        let (first, last) = (value_f64(first)? as u16, value_f64(last)? as u16);
        let host = value_str(primary.first()?)?;
        let port = value_f64(primary.get(1)?)? as u16;
        Some((first..=last, format!("{host}:{port}")))
    };
    entries.iter().filter_map(range).collect()
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::{Route, SlotAddr};

    use super::*;
    use crate::store::keys;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// A `CLUSTER SLOTS` reply: each range's primary on `port`, with a
    /// replica after it.
    fn slots(ranges: &[(i64, i64, i64)]) -> Value {
        let node = |port: i64| Value::Array(vec![text("127.0.0.1"), Value::Int(port), text("id")]);
        Value::Array(
            ranges
                .iter()
                .map(|&(first, last, port)| {
                    let (first, last) = (Value::Int(first), Value::Int(last));
                    Value::Array(vec![first, last, node(port), node(port + 100)])
                })
                .collect(),
        )
    }

    #[test]
    fn a_shards_slot_is_the_one_redis_rs_routes_its_keys_to() {
        let cluster = Layout::cluster(keys::DEFAULT_SHARDS);
        for shard in cluster.shards() {
            let key = cluster.on(shard, "score:");
            let route = Route::new(shard_tags::key_slot(&key), SlotAddr::Master);
            assert_eq!(route, Route::with_key(&key, SlotAddr::Master), "{key}");
        }
        for key in ["plain", "{}empty-tag", "a{b}c", "{unclosed"] {
            let route = Route::new(shard_tags::key_slot(key), SlotAddr::Master);
            assert_eq!(route, Route::with_key(key, SlotAddr::Master), "{key}");
        }
    }

    #[test]
    fn shards_on_one_primary_share_a_pipeline() {
        let cluster = Layout::cluster(keys::DEFAULT_SHARDS);
        let nodes = Nodes::default();
        let shards: Vec<Shard> = cluster.shards().chain(cluster.shards()).collect();
        assert_eq!(nodes.by_node(cluster, &shards), None, "no map yet");
        // One primary for the lower half of the slots, one for the upper.
        let map = primaries(cluster, &slots(&[(0, 8191, 7000), (8192, 16383, 7001)]));
        *nodes.map.write() = Some(map);
        let groups = nodes.by_node(cluster, &shards).unwrap();
        assert_eq!(groups.len(), 2, "{groups:?}");
        let mut places: Vec<usize> = groups.iter().flat_map(|g| g.commands.clone()).collect();
        places.sort();
        assert_eq!(places, (0..shards.len()).collect::<Vec<_>>());
        for group in &groups {
            let lower = |i: &usize| shard_tags::key_slot(&cluster.on(shards[*i], "")) < 8192;
            let first = lower(&group.commands[0]);
            assert!(
                group.commands.iter().all(|i| lower(i) == first),
                "{group:?}"
            );
            assert_eq!(group.slot.map(|s| s < 8192), Some(first));
        }
        nodes.forget();
        assert_eq!(nodes.by_node(cluster, &shards), None);
    }

    #[test]
    fn a_shard_no_range_covers_leaves_the_map_incomplete() {
        let cluster = Layout::cluster(keys::DEFAULT_SHARDS);
        let map = primaries(cluster, &slots(&[(0, 8191, 7000)]));
        let nodes = Nodes::default();
        *nodes.map.write() = Some(map);
        let shards: Vec<Shard> = cluster.shards().collect();
        assert_eq!(nodes.by_node(cluster, &shards), None);
    }

    #[test]
    fn by_shard_keeps_each_shards_commands_together() {
        let shards = [Shard(1), Shard(0), Shard(1)];
        let groups = by_shard(&shards);
        let expected =
            [(None, vec![0, 2]), (None, vec![1])].map(|(slot, commands)| Group { slot, commands });
        assert_eq!(groups, expected);
    }
}
