//! The group directory (`Query.groups`): every group, largest first, paged
//! by cursors like the article feeds.
//!
//! `groups:by-size` holds each group's size, kept by the post and
//! set-groups scripts. The book's code changes `group:<name>` sets without
//! it, so the deriver follows them (see `deriver.rs`).

use futures_util::future::try_join_all;

use super::feeds::{cursor_fields, cursor_value, encode_cursor, malformed_cursor};
use super::scripts;
use super::Store;
use crate::domain::GroupName;
use crate::error::{AppError, AppResult};

/// Where a page of the directory ended: its last group's entry.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPosition {
    /// Minus the group's size when the page was read.
    value: f64,
    name: GroupName,
}

/// Opaque directory cursors (see [`super::Cursor`] for articles').
pub struct GroupCursor;

const KIND: &str = "groups";

impl GroupCursor {
    pub fn encode(position: &GroupPosition) -> String {
        let value = format!("{:?}", position.value);
        encode_cursor(&[KIND, &value, position.name.as_str()])
    }

    pub fn decode(cursor: &str) -> AppResult<GroupPosition> {
        let fields = cursor_fields(cursor)?;
        if fields.first().map(String::as_str) != Some(KIND) {
            // An article feed's cursor, say.
            return Err(AppError::bad_input(
                "after",
                "the cursor belongs to another list",
            ));
        }
        let [_, value, name] = fields.as_slice() else {
            return Err(malformed_cursor());
        };
        let value = cursor_value(value)?;
        let name = GroupName::parse(name).map_err(|_| malformed_cursor())?;
        Ok(GroupPosition { value, name })
    }
}

/// One page of the directory.
pub struct DirectoryPage {
    /// Each group with its size and position.
    pub entries: Vec<(GroupName, u64, GroupPosition)>,
    pub has_next: bool,
    /// Groups in the directory.
    pub total: u64,
}

impl Store {
    /// Up to `first` groups after `after`, largest first.
    pub async fn groups_page(
        &self,
        after: Option<&GroupPosition>,
        first: usize,
    ) -> AppResult<DirectoryPage> {
        let value = after.map(|p| format!("{:?}", p.value));
        let after = after
            .zip(value.as_deref())
            .map(|(p, v)| (v, p.name.as_str()));
        // Each group's size is on its own shard: the slices' pages merge
        // into the page of the whole, in the order one set keeps them.
        let layout = self.layout;
        let pages = layout.shards().map(|shard| async move {
            let mut conn = self.conn().await?;
            scripts::directory(&mut conn, layout.at(shard), after, first).await
        });
        let pages = try_join_all(pages).await?;
        let total = pages.iter().map(|p| p.total).sum();
        let mut members: Vec<(String, f64)> = pages.into_iter().flat_map(|p| p.members).collect();
        members.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        members.truncate(first + 1);
        let mut entries: Vec<_> = members
            .iter()
            .filter_map(|(name, value)| {
                let name = GroupName::parse(name).ok()?;
                let size = (-value).max(0.0) as u64;
                let position = GroupPosition {
                    value: *value,
                    name: name.clone(),
                };
                Some((name, size, position))
            })
            .collect();
        let has_next = entries.len() > first;
        entries.truncate(first);
        Ok(DirectoryPage {
            entries,
            has_next,
            total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_cursors_round_trip_and_refuse_others() {
        let position = GroupPosition {
            value: -12.0,
            name: GroupName::parse("rust").unwrap(),
        };
        let cursor = GroupCursor::encode(&position);
        assert_eq!(GroupCursor::decode(&cursor).unwrap(), position);
        let article_cursor = hex::encode("v1\nscore\nsite\n1.0\n1");
        assert!(GroupCursor::decode(&article_cursor).is_err());
        for bad in ["", "xyz", &hex::encode("v1\ngroups\n-1\nNot Valid")] {
            assert!(GroupCursor::decode(bad).is_err(), "{bad}");
        }
    }
}
