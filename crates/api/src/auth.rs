//! Passwords, login tokens and the per-request session. Redis only sees a
//! token's SHA-256, so a leaked dump holds no usable token. Argon2id runs on
//! the blocking pool: a hash takes tens of milliseconds of CPU.

use std::sync::Arc;

use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rand::RngCore;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use crate::domain::{Password, UserName};
use crate::error::{AppError, AppResult};
use crate::store::keys::Layout;
use crate::store::{Caller, SessionUser, Store};

/// A fresh login token for `name`'s session (32 random bytes,
/// hex-encoded), whose key lands on the account's shard (see
/// `keys::Layout`), so one script writes both.
pub(crate) fn new_token_for(layout: Layout, name: &UserName) -> String {
    let shard = layout.of_user(name);
    let mut bytes = [0u8; 32];
    loop {
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let token = hex::encode(bytes);
        if layout.of_session(&token_hash(&token)) == shard {
            return token;
        }
    }
}

/// What is stored for a token: its SHA-256, hex-encoded.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Argon2id hashing, at most one hash per CPU at a time: a burst of logins
/// queues instead of starving the async workers (and timing out Redis).
#[derive(Clone)]
pub struct PasswordHasher {
    argon2: Arc<Argon2<'static>>,
    permits: Arc<tokio::sync::Semaphore>,
    /// Verified against when a user does not exist, so that a login for an
    /// unknown name costs as much as one with a wrong password.
    dummy_hash: Arc<String>,
}

impl PasswordHasher {
    pub fn new(memory_kib: u32, iterations: u32) -> AppResult<Self> {
        let params = Params::new(memory_kib, iterations, 1, None)
            .map_err(|e| AppError::Internal(format!("argon2 parameters: {e}")))?;
        let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
        let salt = SaltString::generate(&mut rand::rngs::OsRng);
        let dummy_hash = argon2
            .hash_password(b"not a real password", &salt)
            .map_err(|e| AppError::Internal(format!("argon2: {e}")))?
            .to_string();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Self {
            argon2: Arc::new(argon2),
            permits: Arc::new(tokio::sync::Semaphore::new(cpus)),
            dummy_hash: Arc::new(dummy_hash),
        })
    }

    /// Runs `work` on the blocking pool once a CPU permit is free.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> AppResult<T> + Send + 'static,
    ) -> AppResult<T> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| AppError::Internal(format!("hashing permits: {e}")))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| AppError::Internal(format!("hashing task: {e}")))?
    }

    pub async fn hash(&self, password: &Password) -> AppResult<String> {
        let argon2 = self.argon2.clone();
        let password = password.clone();
        self.run(move || {
            let salt = SaltString::generate(&mut rand::rngs::OsRng);
            argon2
                .hash_password(password.expose().as_bytes(), &salt)
                .map(|h| h.to_string())
                .map_err(|e| AppError::Internal(format!("argon2: {e}")))
        })
        .await
    }

    /// Checks a password against a stored hash (or the dummy one when the
    /// user is unknown, always failing then).
    pub(crate) async fn verify(
        &self,
        password: &Password,
        stored: Option<String>,
    ) -> AppResult<bool> {
        let argon2 = self.argon2.clone();
        let password = password.clone();
        let exists = stored.is_some();
        let phc = stored.unwrap_or_else(|| self.dummy_hash.as_ref().clone());
        self.run(move || {
            let parsed = PasswordHash::new(&phc)
                .map_err(|e| AppError::Internal(format!("stored password hash: {e}")))?;
            let ok = argon2
                .verify_password(password.expose().as_bytes(), &parsed)
                .is_ok();
            Ok(ok && exists)
        })
        .await
    }
}

/// The caller of one request, looked up in Redis only when a resolver asks.
///
/// Anonymous reads therefore cost no session lookup, and a request that asks
/// several times looks up once. The lookup reads the role and ban from the
/// account in the same step, so a request acts with them as they are now.
pub struct Session {
    token: Option<String>,
    user: OnceCell<Option<SessionUser>>,
}

impl Session {
    /// Reads `Authorization: Bearer <token>`; anything else is anonymous.
    pub fn from_authorization(header: Option<&str>) -> Self {
        let token = header
            .and_then(|h| {
                let (scheme, rest) = h.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        Self {
            token,
            user: OnceCell::new(),
        }
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// What the token's session holds, looked up once.
    async fn stored(&self, store: &Store) -> AppResult<Option<&SessionUser>> {
        let user = self
            .user
            .get_or_try_init(|| async {
                match &self.token {
                    None => Ok(None),
                    Some(token) => store.session_user(&token_hash(token)).await,
                }
            })
            .await?;
        Ok(user.as_ref())
    }

    /// The logged-in user and their role, or None for no token or an
    /// unknown, expired or banned one.
    pub async fn caller(&self, store: &Store) -> AppResult<Option<Caller>> {
        Ok(match self.stored(store).await? {
            Some(SessionUser::Active(caller)) => Some(caller.clone()),
            _ => None,
        })
    }

    /// The logged-in user (see [`Session::caller`]).
    pub async fn user(&self, store: &Store) -> AppResult<Option<UserName>> {
        Ok(self.caller(store).await?.map(|caller| caller.name))
    }

    /// The logged-in user and role; BANNED while the token's account is
    /// banned, else UNAUTHENTICATED.
    pub(crate) async fn require_caller(&self, store: &Store) -> AppResult<Caller> {
        self.refuse_banned(store).await?;
        match self.caller(store).await? {
            Some(caller) => Ok(caller),
            None if self.token.is_some() => Err(AppError::Unauthenticated(
                "the login token is invalid or expired; log in again",
            )),
            None => Err(AppError::Unauthenticated(
                "log in first: send the header `Authorization: Bearer <token>`",
            )),
        }
    }

    /// BANNED while the token's account is banned; Ok for any other token.
    pub(crate) async fn refuse_banned(&self, store: &Store) -> AppResult<()> {
        match self.stored(store).await? {
            Some(SessionUser::Banned { until, .. }) => Err(AppError::Banned { until: *until }),
            _ => Ok(()),
        }
    }
}
