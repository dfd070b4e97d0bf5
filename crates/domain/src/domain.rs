//! Parse-don't-validate newtypes for everything a client sends.
//!
//! A value of one of these types has passed the API's rules, so code past the
//! GraphQL edge never re-checks input and invalid data cannot reach Redis.

use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

use crate::error::{AppError, AppResult};

/// An article title: 1–300 characters, stored in Unicode NFC and trimmed.
/// Refused: no visible character; control or bidirectional-control
/// characters (a right-to-left override makes a title read other than it
/// says); more than [`ArticleTitle::MAX_COMBINING_RUN`] combining marks in a
/// row ("Zalgo" text spilling over lines; real scripts stack at most three).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArticleTitle(String);

impl ArticleTitle {
    pub(crate) const MAX_CHARS: usize = 300;
    pub(crate) const MAX_COMBINING_RUN: usize = 3;

    pub fn parse(raw: &str) -> AppResult<Self> {
        let bad = |message: &str| Err(AppError::bad_input("title", message));
        let too_long = "title must be at most 300 characters";
        // Cheap bound before normalising: NFC never shrinks below a quarter.
        if raw.len() > Self::MAX_CHARS * 4 * 4 {
            return bad(too_long);
        }
        let normalized: String = raw.nfc().collect();
        let trimmed = normalized.trim();
        if trimmed.is_empty() {
            return bad("title must not be empty");
        }
        if trimmed.chars().count() > Self::MAX_CHARS {
            return bad(too_long);
        }
        if trimmed.chars().any(char::is_control) {
            return bad("title must not contain control characters");
        }
        if trimmed.chars().any(is_bidi_control) {
            return bad("title must not contain bidirectional control characters");
        }
        if !trimmed
            .chars()
            .any(|c| !c.is_whitespace() && !is_invisible(c) && !is_combining_mark(c))
        {
            return bad("title must contain visible characters");
        }
        let mut run = 0;
        for c in trimmed.chars() {
            run = if is_combining_mark(c) { run + 1 } else { 0 };
            if run > Self::MAX_COMBINING_RUN {
                return bad("title must not stack more than 3 combining marks on a character");
            }
        }
        Ok(Self(trimmed.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Characters that change the direction of the text around them.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Characters that print nothing: zero-width spaces and joiners, fillers,
/// format characters, variation selectors, tags, the blank braille cell.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200D}' | '\u{2060}'..='\u{2064}'
        | '\u{2800}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{E0000}'..='\u{E0FFF}')
}

/// An absolute `http`/`https` URL of at most 2,048 bytes, stored in the
/// URL standard's normal form, so two spellings of one link are one link.
/// It must start with `http://` or `https://` (a browser and the parser
/// read `https:evil.example` as a link), and carry no spaces or control
/// characters (the parser drops a raw newline) nor credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link(String);

impl Link {
    pub(crate) const MAX_BYTES: usize = 2048;

    pub fn parse(raw: &str) -> AppResult<Self> {
        let raw = raw.trim();
        let bad = |message: &str| Err(AppError::bad_input("link", message));
        let too_long = "link must be at most 2048 bytes";
        if raw.len() > Self::MAX_BYTES {
            return bad(too_long);
        }
        if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return bad("link must not contain spaces or control characters");
        }
        let lower = raw.get(..8).unwrap_or(raw).to_ascii_lowercase();
        let url = url::Url::parse(raw).ok().filter(|url| {
            (lower.starts_with("http://") || lower.starts_with("https://"))
                && matches!(url.scheme(), "http" | "https")
                && url.host_str().is_some_and(|host| !host.is_empty())
        });
        let Some(url) = url else {
            return bad("link must be an absolute http or https URL (http://host/…)");
        };
        if !url.username().is_empty() || url.password().is_some() {
            return bad("link must not contain a user name or password");
        }
        if url.as_str().len() > Self::MAX_BYTES {
            return bad(too_long);
        }
        Ok(Self(url.into()))
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

    /// Most groups one list argument may name (and one article may be in).
    pub const MAX_PER_ARTICLE: usize = 10;

    /// Most names one list argument may carry, duplicates included: the
    /// bound on the work of reading a list, checked before any name is.
    pub(crate) const MAX_LISTED: usize = 100;

    /// At most [`GroupName::MAX_PER_ARTICLE`] distinct names, in first
    /// order; the raw length is checked first, so a huge list costs nothing.
    pub fn parse_many(raw: &[String], field: &'static str) -> AppResult<Vec<Self>> {
        if raw.len() > Self::MAX_LISTED {
            return Err(AppError::bad_input(
                field,
                format!("{field} may list at most {} names", Self::MAX_LISTED),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(raw.len());
        let mut out: Vec<Self> = Vec::with_capacity(raw.len().min(Self::MAX_PER_ARTICLE));
        for r in raw {
            let g = Self::parse_field(r, field)?;
            if seen.insert(g.clone()) {
                out.push(g);
            }
        }
        if out.len() > Self::MAX_PER_ARTICLE {
            return Err(AppError::bad_input(
                field,
                format!(
                    "{field} may name at most {} distinct groups",
                    Self::MAX_PER_ARTICLE
                ),
            ));
        }
        Ok(out)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Which global ranking a list is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    Score,
    Time,
}

/// A period of the `TOP_*` orders: articles posted within it, ranked by
/// net votes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    Day,
    Week,
    Month,
    Year,
    All,
}

impl Period {
    pub const ALL: [Period; 5] = [
        Period::Day,
        Period::Week,
        Period::Month,
        Period::Year,
        Period::All,
    ];

    /// The name in keys (`top:week`) and cursors.
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
            Period::All => "all",
        }
    }

    /// How far back the period reaches; None for all time.
    pub fn secs(self) -> Option<u64> {
        const DAY: u64 = 24 * 60 * 60;
        match self {
            Period::Day => Some(DAY),
            Period::Week => Some(7 * DAY),
            Period::Month => Some(30 * DAY),
            Period::Year => Some(365 * DAY),
            Period::All => None,
        }
    }
}

/// What a user may do beyond posting, voting and flagging.
#[cfg_attr(feature = "graphql", derive(async_graphql::Enum))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Posts, votes and flags.
    #[default]
    Member,
    /// Also removes and restores articles, bans members, reads the queue.
    Moderator,
    /// Also bans moderators and admins, and sets roles.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Member => "member",
            Role::Moderator => "moderator",
            Role::Admin => "admin",
        }
    }

    /// A stored or typed role (`member`, `moderator`, `admin`).
    pub fn parse(raw: &str) -> Option<Self> {
        [Role::Member, Role::Moderator, Role::Admin]
            .into_iter()
            .find(|role| role.as_str() == raw)
    }

    /// Moderators and admins.
    pub fn moderates(self) -> bool {
        self != Role::Member
    }
}

/// Where moderation left an article.
#[cfg_attr(feature = "graphql", derive(async_graphql::Enum))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArticleStatus {
    /// In every view, unflagged.
    #[default]
    Visible,
    /// Has flags, still in every view.
    Flagged,
    /// Flags that may hide it reached `--flag-threshold`: out of every
    /// public view until a moderator removes or restores it.
    Hidden,
    /// Removed by a moderator.
    Removed,
}

impl ArticleStatus {
    /// From the article hash's `status` field and flag count.
    pub fn of(status: Option<&str>, flags: i64) -> Self {
        match status {
            Some("removed") => Self::Removed,
            Some(_) => Self::Hidden,
            None if flags > 0 => Self::Flagged,
            None => Self::Visible,
        }
    }

    /// Out of every ranking and public view.
    pub fn is_out(self) -> bool {
        matches!(self, Self::Hidden | Self::Removed)
    }
}

/// What a moderation log entry records.
#[cfg_attr(feature = "graphql", derive(async_graphql::Enum))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModAction {
    /// A moderator removed an article.
    RemoveArticle,
    /// A moderator restored a removed or hidden article.
    RestoreArticle,
    /// Flags that may hide the article reached `--flag-threshold`.
    HideArticle,
    BanUser,
    UnbanUser,
    /// An admin (or the operator, with `votegraph set-role`) set a role.
    SetRole,
}

impl ModAction {
    /// Every action, once.
    const ALL: [ModAction; 6] = [
        ModAction::RemoveArticle,
        ModAction::RestoreArticle,
        ModAction::HideArticle,
        ModAction::BanUser,
        ModAction::UnbanUser,
        ModAction::SetRole,
    ];

    /// The name entries store: the API's (a test holds them equal), spelled
    /// out so that the store needs no GraphQL.
    pub fn as_str(self) -> &'static str {
        match self {
            ModAction::RemoveArticle => "REMOVE_ARTICLE",
            ModAction::RestoreArticle => "RESTORE_ARTICLE",
            ModAction::HideArticle => "HIDE_ARTICLE",
            ModAction::BanUser => "BAN_USER",
            ModAction::UnbanUser => "UNBAN_USER",
            ModAction::SetRole => "SET_ROLE",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|action| action.as_str() == raw)
    }
}

/// The direction of one user's vote on one article: up, down, or neither
/// (no vote, or one taken back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteDirection {
    Up,
    Down,
    Neither,
}

/// A user name: `[A-Za-z0-9_-]{3,32}`. Two names that differ only in
/// case are one name (see [`UserName::folded`]): readers could not tell
/// `CaseTwin` from `casetwin` apart.
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

    /// A name read from Redis, where only validated names are written.
    pub fn from_stored(raw: String) -> Self {
        Self(raw)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The form under which its case variants are one: case folding and
    /// NFKC, twice (Unicode's compatibility caseless match: each can undo
    /// the other's normal form). Lower case for ASCII names; right still
    /// if the alphabet grows.
    pub fn folded(&self) -> String {
        let once: String = caseless::default_case_fold_str(&self.0).nfkc().collect();
        caseless::default_case_fold_str(&once).nfkc().collect()
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
    pub(crate) const MAX_CHARS: usize = 80;
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

/// `value` of the argument `field` when it is 1 to `max`.
pub fn parse_count(field: &'static str, value: i32, max: i32) -> AppResult<usize> {
    if (1..=max).contains(&value) {
        Ok(value as usize)
    } else {
        let message = format!("{field} must be between 1 and {max}");
        Err(AppError::bad_input(field, message))
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
    pub(crate) const MAX_PAGE: i32 = 10_000;
    pub(crate) const MAX_PAGE_SIZE: i32 = 100;

    pub fn parse(page: i32, page_size: i32) -> AppResult<Self> {
        Ok(Self {
            page: parse_count("page", page, Self::MAX_PAGE)? as u32,
            page_size: parse_count("pageSize", page_size, Self::MAX_PAGE_SIZE)? as u32,
        })
    }

    /// The ranks skipped before the page, and the page's size.
    pub fn span(&self) -> (usize, usize) {
        let size = self.page_size as usize;
        ((self.page as usize).saturating_sub(1) * size, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_differ_only_in_case_fold_alike() {
        let fold = |n: &str| UserName::from_stored(n.to_owned()).folded();
        assert_eq!(fold("CaseTwin"), fold("casetwin"));
        assert_eq!(fold("CASE-twin_1").as_str(), "case-twin_1");
        assert_ne!(fold("casetwin"), fold("casetwim"));
        // Full folding and compatibility forms, should names ever allow
        // them: ß is ss, the ligature ﬁ is fi, K (Kelvin) is k.
        assert_eq!(fold("Stra\u{DF}e"), fold("STRASSE"));
        assert_eq!(fold("\u{FB01}le"), fold("FILE"));
        assert_eq!(fold("\u{212A}elvin"), fold("kelvin"));
    }

    #[test]
    fn titles_are_trimmed_and_bounded() {
        assert_eq!(ArticleTitle::parse("  hi ").unwrap().as_str(), "hi");
        assert!(ArticleTitle::parse("   ").is_err());
        assert!(ArticleTitle::parse(&"é".repeat(300)).is_ok());
        assert!(ArticleTitle::parse(&"é".repeat(301)).is_err());
    }

    #[test]
    fn titles_are_normalised_and_must_be_visible_and_plain() {
        // NFC: "e" + combining acute becomes one "é".
        assert_eq!(ArticleTitle::parse("Cafe\u{301}").unwrap().as_str(), "Café");
        for bad in [
            "\u{200B}\u{200B}\u{200B}",
            "\u{FEFF} \u{2060}",
            "\u{3164}",
            "abc\u{202E}gnp.exe",
            "\u{2067}hidden\u{2069}",
            "line\nbreak",
        ] {
            assert!(ArticleTitle::parse(bad).is_err(), "{bad:?}");
        }
        let zalgo = format!("a{}", "\u{0301}\u{0302}\u{0303}\u{0304}".repeat(75));
        assert!(ArticleTitle::parse(&zalgo).is_err());
        // NFC folds the first mark into "á"; four more stay: refused.
        assert!(ArticleTitle::parse("a\u{0301}\u{0302}\u{0303}\u{0304}\u{0305}").is_err());
        assert!(ArticleTitle::parse("a\u{0301}\u{0302}\u{0303}\u{0304}").is_ok());
        // Real text with marks and joiners passes.
        for good in [
            "Tiếng Việt có dấu",
            "हिन्दी",
            "👩‍💻 at work",
            "ǹ̂ ok",
            "日本語のタイトル",
        ] {
            assert!(ArticleTitle::parse(good).is_ok(), "{good}");
        }
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
            "https:evil.example",
            "https:/evil.example",
            "https://evil.example/a\nb",
            "https://evil.example/a b",
            "https://bank.example@evil.example/",
        ] {
            assert!(Link::parse(bad).is_err(), "{bad}");
        }
        // Stored normalised.
        assert_eq!(
            Link::parse("HTTPS://Example.COM").unwrap().as_str(),
            "https://example.com/"
        );
        assert_eq!(
            Link::parse("https://bücher.example/ä?q=1")
                .unwrap()
                .as_str(),
            "https://xn--bcher-kva.example/%C3%A4?q=1"
        );
        let long = format!("https://example.com/{}", "a".repeat(2048));
        assert!(Link::parse(&long).is_err());
    }

    #[test]
    fn group_lists_are_capped_and_deduplicated() {
        let names = |n: usize| (0..n).map(|i| format!("g{i}")).collect::<Vec<_>>();
        assert_eq!(
            GroupName::parse_many(&names(10), "groups").unwrap().len(),
            10
        );
        assert!(GroupName::parse_many(&names(11), "groups").is_err());
        let dup = vec!["a".to_owned(), "b".to_owned(), "a".to_owned()];
        let parsed = GroupName::parse_many(&dup, "groups").unwrap();
        assert_eq!(
            parsed.iter().map(GroupName::as_str).collect::<Vec<_>>(),
            ["a", "b"]
        );
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
        assert_eq!(PageRequest::parse(1, 25).unwrap().span(), (0, 25));
        assert_eq!(PageRequest::parse(3, 10).unwrap().span(), (20, 10));
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
        assert!(ArticleId::parse("abc", "id").is_err());
        assert!(ArticleId::parse("0", "id").is_err());
    }

    #[cfg(feature = "graphql")]
    #[test]
    fn mod_actions_are_stored_by_their_graphql_names() {
        use async_graphql::resolver_utils::EnumType;
        let items = ModAction::items();
        assert_eq!(items.len(), ModAction::ALL.len());
        for item in items {
            assert_eq!(item.value.as_str(), item.name);
            assert_eq!(ModAction::parse(item.name), Some(item.value));
        }
    }
}
