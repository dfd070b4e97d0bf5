//! Parse-don't-validate newtypes for everything a client sends.
//!
//! A value of one of these types has passed the API's rules, so code past the
//! GraphQL edge never re-checks input and invalid data cannot reach Redis.

use crate::error::{AppError, AppResult};

/// An article title: 1–300 characters once trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArticleTitle(String);

impl ArticleTitle {
    pub const MAX_CHARS: usize = 300;

    pub fn parse(raw: &str) -> AppResult<Self> {
        let trimmed = raw.trim();
        let chars = trimmed.chars().count();
        if chars == 0 {
            return Err(AppError::bad_input("title", "title must not be empty"));
        }
        if chars > Self::MAX_CHARS {
            return Err(AppError::bad_input(
                "title",
                format!("title must be at most {} characters", Self::MAX_CHARS),
            ));
        }
        if trimmed.chars().any(char::is_control) {
            return Err(AppError::bad_input(
                "title",
                "title must not contain control characters",
            ));
        }
        Ok(Self(trimmed.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An absolute `http`/`https` URL of at most 2,048 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link(String);

impl Link {
    pub const MAX_BYTES: usize = 2048;

    pub fn parse(raw: &str) -> AppResult<Self> {
        let raw = raw.trim();
        if raw.len() > Self::MAX_BYTES {
            return Err(AppError::bad_input(
                "link",
                format!("link must be at most {} bytes", Self::MAX_BYTES),
            ));
        }
        let url = url::Url::parse(raw).map_err(|_| {
            AppError::bad_input("link", "link must be an absolute http or https URL")
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
            return Err(AppError::bad_input(
                "link",
                "link must be an absolute http or https URL",
            ));
        }
        // Stored as the client sent it (trimmed): clients compare what they
        // posted with what they read back.
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// A group name: `[a-z0-9][a-z0-9_-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupName(String);

impl GroupName {
    pub fn parse(raw: &str) -> AppResult<Self> {
        Self::parse_field(raw, "name")
    }

    /// Like [`GroupName::parse`], naming `field` in the error.
    pub fn parse_field(raw: &str, field: &'static str) -> AppResult<Self> {
        let b = raw.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 64
            && is_lower_alnum(b[0])
            && b[1..]
                .iter()
                .all(|&c| is_lower_alnum(c) || c == b'_' || c == b'-');
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(AppError::bad_input(
                field,
                format!(
                    "invalid group name {raw:?}: use 1-64 characters a-z, 0-9, '_' or '-', starting with a letter or digit"
                ),
            ))
        }
    }

    /// Parses a list, dropping duplicates while keeping the first order.
    pub fn parse_many(raw: &[String], field: &'static str) -> AppResult<Vec<Self>> {
        let mut out: Vec<Self> = Vec::with_capacity(raw.len());
        for r in raw {
            let g = Self::parse_field(r, field)?;
            if !out.contains(&g) {
                out.push(g);
            }
        }
        Ok(out)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A user name: `[A-Za-z0-9_-]{3,32}`, compared case-sensitively.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserName(String);

impl UserName {
    pub fn parse(raw: &str) -> AppResult<Self> {
        let ok = (3..=32).contains(&raw.len())
            && raw
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(AppError::bad_input(
                "name",
                "name must be 3-32 characters of A-Z, a-z, 0-9, '_' or '-'",
            ))
        }
    }

    /// A name already stored in Redis (a session or a poster field); it is
    /// trusted because only validated names are ever written by votegraph.
    pub fn from_stored(raw: String) -> Self {
        Self(raw)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The member used for this user in `voted:<id>` sets and `poster` fields.
    pub fn member(&self) -> String {
        format!("user:{}", self.0)
    }
}

/// A password: 8–256 bytes. Never logged, never stored in clear.
#[derive(Clone)]
pub struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl Password {
    pub fn parse(raw: &str) -> AppResult<Self> {
        if (8..=256).contains(&raw.len()) {
            Ok(Self(raw.to_owned()))
        } else {
            Err(AppError::bad_input(
                "password",
                "password must be 8-256 bytes long",
            ))
        }
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// A URL-friendly article handle: `[a-z0-9]+(-[a-z0-9]+)*`, at most 80
/// characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slug(String);

impl Slug {
    pub const MAX_CHARS: usize = 80;
    /// Room left for the `-N` suffix that makes a derived slug unique.
    const STEM_CHARS: usize = 60;

    pub fn parse(raw: &str) -> AppResult<Self> {
        let ok = !raw.is_empty()
            && raw.len() <= Self::MAX_CHARS
            && raw
                .split('-')
                .all(|part| !part.is_empty() && part.bytes().all(is_lower_alnum));
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(AppError::bad_input(
                "slug",
                "slug must be 1-80 characters: words of a-z and 0-9 joined by single '-'",
            ))
        }
    }

    /// The stem of a new article's slug: the title's ASCII letters and
    /// digits, lower-cased, other runs of characters made one '-'
    /// ("Hello, World!" → "hello-world"); "article" when nothing is left.
    pub fn from_title(title: &ArticleTitle) -> Self {
        let mut slug = String::with_capacity(Self::STEM_CHARS);
        for c in title.as_str().chars() {
            if slug.len() >= Self::STEM_CHARS {
                break;
            }
            if c.is_ascii_alphanumeric() {
                slug.push(c.to_ascii_lowercase());
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
        }
        while slug.ends_with('-') {
            slug.pop();
        }
        if slug.is_empty() {
            slug.push_str("article");
        }
        Self(slug)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How many users a leaderboard query may return: 1–100.
pub fn parse_limit(limit: i32) -> AppResult<usize> {
    if (1..=100).contains(&limit) {
        Ok(limit as usize)
    } else {
        Err(AppError::bad_input(
            "limit",
            "limit must be between 1 and 100",
        ))
    }
}

/// The numeric id of an article (`7` for the key `article:7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArticleId(pub u64);

impl ArticleId {
    pub fn parse(raw: &str, field: &'static str) -> AppResult<Self> {
        match raw.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Self(n)),
            _ => Err(AppError::bad_input(
                field,
                format!("{field} must be a positive integer id"),
            )),
        }
    }

    /// Reads an `article:<id>` sorted-set member; other members are ignored.
    pub fn from_member(member: &str) -> Option<Self> {
        member
            .strip_prefix("article:")
            .and_then(|n| n.parse().ok())
            .map(Self)
    }
}

impl std::fmt::Display for ArticleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One page of a ranking, already checked against the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub page: u32,
    pub page_size: u32,
}

impl PageRequest {
    pub const MAX_PAGE: i32 = 10_000;
    pub const MAX_PAGE_SIZE: i32 = 100;

    pub fn parse(page: i32, page_size: i32) -> AppResult<Self> {
        if !(1..=Self::MAX_PAGE).contains(&page) {
            return Err(AppError::bad_input(
                "page",
                format!("page must be between 1 and {}", Self::MAX_PAGE),
            ));
        }
        if !(1..=Self::MAX_PAGE_SIZE).contains(&page_size) {
            return Err(AppError::bad_input(
                "pageSize",
                format!("pageSize must be between 1 and {}", Self::MAX_PAGE_SIZE),
            ));
        }
        Ok(Self {
            page: page as u32,
            page_size: page_size as u32,
        })
    }

    /// Inclusive rank range for `ZREVRANGE`.
    pub fn range(&self) -> (isize, isize) {
        let start = (self.page as isize - 1) * self.page_size as isize;
        (start, start + self.page_size as isize - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_trimmed_and_bounded() {
        assert_eq!(ArticleTitle::parse("  hi ").unwrap().as_str(), "hi");
        assert!(ArticleTitle::parse("   ").is_err());
        assert!(ArticleTitle::parse(&"é".repeat(300)).is_ok());
        assert!(ArticleTitle::parse(&"é".repeat(301)).is_err());
    }

    #[test]
    fn links_must_be_absolute_http() {
        assert!(Link::parse("https://example.com/a?b=c").is_ok());
        assert!(Link::parse("http://example.com").is_ok());
        for bad in [
            "ftp://x.org",
            "/relative",
            "example.com",
            "javascript:alert(1)",
            "http://",
        ] {
            assert!(Link::parse(bad).is_err(), "{bad}");
        }
        let long = format!("https://example.com/{}", "a".repeat(2048));
        assert!(Link::parse(&long).is_err());
    }

    #[test]
    fn group_names_follow_the_pattern() {
        for good in ["a", "rust", "0day", "a_b-c", &"x".repeat(64)] {
            assert!(GroupName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "_a", "-a", "Rust", "a b", "é", &"x".repeat(65)] {
            assert!(GroupName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn user_names_and_passwords() {
        assert!(UserName::parse("Al_1-x").is_ok());
        assert!(UserName::parse("al").is_err());
        assert!(UserName::parse(&"a".repeat(33)).is_err());
        assert!(UserName::parse("al:ice").is_err());
        assert!(Password::parse("1234567").is_err());
        assert!(Password::parse("12345678").is_ok());
        assert!(Password::parse(&"p".repeat(257)).is_err());
    }

    #[test]
    fn pages_translate_to_ranges() {
        assert_eq!(PageRequest::parse(1, 25).unwrap().range(), (0, 24));
        assert_eq!(PageRequest::parse(3, 10).unwrap().range(), (20, 29));
        assert!(PageRequest::parse(0, 25).is_err());
        assert!(PageRequest::parse(10_001, 25).is_err());
        assert!(PageRequest::parse(1, 0).is_err());
        assert!(PageRequest::parse(1, 101).is_err());
    }

    #[test]
    fn slugs_from_titles_and_by_hand() {
        let slug = |t: &str| Slug::from_title(&ArticleTitle::parse(t).unwrap()).0;
        assert_eq!(slug("Hello, World!"), "hello-world");
        assert_eq!(slug("  Rust 2024 -- what's new?  "), "rust-2024-what-s-new");
        assert_eq!(slug("日本語"), "article");
        assert_eq!(slug("Ünïcode café"), "n-code-caf");
        assert!(slug(&"word ".repeat(40)).len() <= 60);
        assert!(Slug::parse(&slug(&"word ".repeat(40))).is_ok());
        for good in ["a", "hello-world", "2024", &"a".repeat(80)] {
            assert!(Slug::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "Hello",
            "a b",
            "a_b",
            &"a".repeat(81),
        ] {
            assert!(Slug::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn article_members() {
        assert_eq!(ArticleId::from_member("article:12"), Some(ArticleId(12)));
        assert_eq!(ArticleId::from_member("post:12"), None);
        assert!(ArticleId::parse("abc", "id").is_err());
        assert!(ArticleId::parse("0", "id").is_err());
    }
}
