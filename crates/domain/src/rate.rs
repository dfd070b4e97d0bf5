//! Rate limits: which writes are counted ([`RateAction`]), whose budget
//! a count is ([`RateScope`]), and the limits themselves ([`RateLimit`],
//! [`RateLimits`]), the settings the store's scripts count against.
//! Everything here is plain data, below the store and the error type.

use std::fmt;
use std::str::FromStr;

/// A write that is rate limited; its name is the last part of its counter's
/// key (`user:<name>:rate:vote`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateAction {
    SignUp,
    LogIn,
    View,
    Post,
    Vote,
    SetGroups,
    RenameSlug,
    Flag,
    /// Removing, restoring, banning, unbanning, setting roles.
    Moderate,
    /// Registering a new automatic persisted query.
    RegisterQuery,
}

impl RateAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RateAction::SignUp => "sign-up",
            RateAction::LogIn => "log-in",
            RateAction::View => "view",
            RateAction::Post => "post",
            RateAction::Vote => "vote",
            RateAction::SetGroups => "set-groups",
            RateAction::RenameSlug => "rename-slug",
            RateAction::Flag => "flag",
            RateAction::Moderate => "moderate",
            RateAction::RegisterQuery => "register-query",
        }
    }

    /// What was counted, for "too many …" in the error message.
    pub fn counted(self) -> &'static str {
        match self {
            RateAction::SignUp => "sign-ups",
            RateAction::LogIn => "login attempts",
            RateAction::View => "views",
            RateAction::Post => "posts",
            RateAction::Vote => "votes",
            RateAction::SetGroups => "group changes",
            RateAction::RenameSlug => "slug renames",
            RateAction::Flag => "flags",
            RateAction::Moderate => "moderation actions",
            RateAction::RegisterQuery => "persisted-query registrations",
        }
    }
}

/// Whose budget a rate limit counted, as the error message says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateScope {
    /// A user name (logIn's per-name limit, whoever sends the attempts).
    Name,
    Address,
    User,
    /// Every client together.
    Site,
}

impl RateScope {
    pub fn suffix(self) -> &'static str {
        match self {
            RateScope::Name => " for this name",
            RateScope::Address => " from this address",
            RateScope::User => "",
            RateScope::Site => " from all clients",
        }
    }
}

/// A fixed-window rate limit, `COUNT/SECONDS`, the window starting at the
/// first call. Both are at least 1: a zero is likelier a typo than a wish
/// to forbid an action or never expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    count: u32,
    window_secs: u32,
}

impl RateLimit {
    pub fn new(count: u32, window_secs: u32) -> Result<Self, String> {
        if count == 0 || window_secs == 0 {
            return Err(format!(
                "rate limit {count}/{window_secs}: both the count and the window must be at least 1"
            ));
        }
        Ok(Self { count, window_secs })
    }

    pub fn count(self) -> u32 {
        self.count
    }

    pub fn window_secs(self) -> u32 {
        self.window_secs
    }
}

impl FromStr for RateLimit {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let malformed = || format!("{raw:?} is not COUNT/SECONDS (e.g. 10/3600)");
        let (count, window) = raw.trim().split_once('/').ok_or_else(malformed)?;
        let count = count.trim().parse().map_err(|_| malformed())?;
        let window = window.trim().parse().map_err(|_| malformed())?;
        Self::new(count, window)
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, self.window_secs)
    }
}

/// Every write limit, handed to the resolvers as schema data.
#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    /// Per client address.
    pub sign_up: RateLimit,
    /// Per client address (the per-name limit is `Settings::login_limit` in `config`).
    pub log_in: RateLimit,
    /// Per user, or per client address when anonymous.
    pub view: RateLimit,
    /// Per user.
    pub post: PostLimits,
    pub vote: RateLimit,
    pub set_groups: RateLimit,
    pub rename_slug: RateLimit,
    /// flag and unflag.
    pub flag: RateLimit,
    /// Every moderation mutation but flags.
    pub moderate: RateLimit,
    /// How long a viewer's repeated views of one article are not counted.
    pub view_window_secs: u64,
}

/// What a poster may post: `rate` posts per window; a repost of one link
/// within `dedupe_secs` (0: never) answers the first article, uncounted.
#[derive(Debug, Clone, Copy)]
pub struct PostLimits {
    pub rate: RateLimit,
    pub dedupe_secs: u64,
}
