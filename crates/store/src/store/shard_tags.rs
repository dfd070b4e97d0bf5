//! The hash tags that place the cluster layout's keys on its shards.
//!
//! A shard's tag is the first `{s<i>.<k>}` whose slot lies near the middle
//! of the i-th of N equal parts of the 16,384 slots. A cluster whose
//! primaries split the slots evenly (as `redis-cli --cluster create`
//! does) then gives each primary the same number of shards whenever N is
//! a multiple of the primaries. The rule gives the six shards of keyspaces
//! created before the count could be chosen their tags of then.

use std::sync::{LazyLock, Mutex};

/// Slots in a Redis Cluster.
const SLOTS: usize = 16_384;

/// How far from the middle of its part a shard's slot may lie.
const NEAR_MIDDLE: usize = 32;

/// The most shards a keyspace may have: each part then still holds a
/// tag's window around its middle.
pub const MAX_SHARDS: u16 = 128;

/// A count of shards and their tags, made once per count and kept for the
/// process's life (at most [`MAX_SHARDS`] of them).
#[derive(Debug)]
pub struct ShardTags {
    tags: Box<[String]>,
}

static MADE: LazyLock<Mutex<Vec<&'static ShardTags>>> = LazyLock::new(Mutex::default);

impl ShardTags {
    /// The tags of `count` shards, `1..=MAX_SHARDS`.
    pub fn of(count: u16) -> &'static ShardTags {
        assert!((1..=MAX_SHARDS).contains(&count), "{count} shards");
        let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tags) = made.iter().find(|t| t.count() == usize::from(count)) {
            return tags;
        }
        let count = usize::from(count);
        let tags = (0..count).map(|i| tag(i, count)).collect();
        let tags: &'static ShardTags = Box::leak(Box::new(ShardTags { tags }));
        made.push(tags);
        tags
    }

    pub fn count(&self) -> usize {
        self.tags.len()
    }

    /// Shard `i`'s tag, braces included.
    pub fn tag(&self, i: usize) -> &str {
        &self.tags[i % self.tags.len()]
    }
}

fn tag(i: usize, count: usize) -> String {
    let middle = (2 * i + 1) * SLOTS / (2 * count);
    (0..)
        .map(|k| format!("s{i}.{k}"))
        .find(|name| slot(name).abs_diff(middle) <= NEAR_MIDDLE)
        .map(|name| format!("{{{name}}}"))
        .unwrap_or_default()
}

/// The slot Redis gives `key`: that of its hash tag, when it has one.
pub fn key_slot(key: &str) -> u16 {
    let tagged = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty());
    slot(tagged.unwrap_or(key)) as u16
}

/// The slot of a key with no hash tag of its own: CRC16 (XMODEM) of it,
/// modulo the slots, as Redis computes it.
pub fn slot(key: &str) -> usize {
    let mut crc: u16 = 0;
    for b in key.bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    usize::from(crc) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_computes_the_same_slots() {
        assert_eq!(slot("123456789"), 0x31C3);
    }

    #[test]
    fn six_shards_keep_the_tags_they_had() {
        let six = ShardTags::of(6);
        let tags: Vec<&str> = (0..6).map(|i| six.tag(i)).collect();
        let had = [
            "{s0.127}", "{s1.560}", "{s2.148}", "{s3.57}", "{s4.573}", "{s5.29}",
        ];
        assert_eq!(tags, had);
    }

    /// Primaries splitting the slots as `redis-cli --cluster create` does.
    fn owner(slot: usize, primaries: usize) -> usize {
        (slot * primaries / SLOTS).min(primaries - 1)
    }

    #[test]
    fn every_count_spreads_evenly_over_primaries_it_is_a_multiple_of() {
        for count in 1..=MAX_SHARDS {
            let tags = ShardTags::of(count);
            let count = usize::from(count);
            assert_eq!(tags.count(), count);
            for primaries in (1..=count).filter(|p| count % p == 0) {
                let mut held = vec![0; primaries];
                for i in 0..count {
                    let name = tags.tag(i).trim_matches(['{', '}']);
                    held[owner(slot(name), primaries)] += 1;
                }
                assert!(
                    held.iter().all(|&h| h == count / primaries),
                    "{count}: {held:?}"
                );
            }
        }
    }

    #[test]
    fn a_count_is_made_once() {
        assert!(std::ptr::eq(ShardTags::of(12), ShardTags::of(12)));
    }
}
