//! The Relay connection pieces shared by every paginated list (`feed`,
//! `groups`): clients such as Relay and Apollo's `relayStylePagination`
//! recognise these exact shapes, so every connection reuses them.

use async_graphql::SimpleObject;

/// Where a page of a connection ends and whether there is more after it
/// (Relay's `PageInfo`, forward pagination only).
#[derive(SimpleObject, Debug, Clone, PartialEq, Eq)]
pub struct PageInfo {
    /// True when a page requested with `after: endCursor` would not be empty.
    pub has_next_page: bool,
    /// The cursor of the last edge of this page; null when the page is empty.
    pub end_cursor: Option<String>,
}
