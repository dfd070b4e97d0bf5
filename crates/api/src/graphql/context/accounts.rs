//! Accounts and sessions: signing up, logging in and out.

use async_graphql::Result;

use crate::auth::{new_token_for, token_hash, Session};
use crate::client_addr::ClientAddr;
use crate::domain::{Password, UserName};
use crate::error::AppError;
use crate::state::AppState;

pub struct Accounts<'a> {
    pub(super) app: &'a AppState,
    pub(super) session: &'a Session,
    pub(super) client: ClientAddr,
}

impl Accounts<'_> {
    /// Creates an account and its first session; returns the token.
    pub async fn sign_up(&self, name: &UserName, password: &Password) -> Result<String> {
        let (store, limit) = (&self.app.store, self.app.rates.sign_up);
        store.sign_up_budget(self.client, limit).await?;
        let hash = self.app.hasher.hash(password).await?;
        let token = new_token_for(store.layout(), name);
        if !store
            .create_user(name, &hash, &token_hash(&token), self.client, limit)
            .await?
        {
            return Err(AppError::bad_input(
                "name",
                format!("the name {:?} is already taken", name.as_str()),
            )
            .into());
        }
        Ok(token)
    }

    /// Checks a name and password (counting the attempt first); returns a
    /// new session's token. Wrong and unknown names answer alike.
    pub async fn log_in(&self, name: &UserName, password: &Password) -> Result<String> {
        let store = &self.app.store;
        store
            .login_attempt(name, self.client, self.app.login, self.app.rates.log_in)
            .await?;
        // Any case of a name logs into its account.
        let (name, stored) = store.account(name).await?.unzip();
        if !self.app.hasher.verify(password, stored).await? {
            return Err(invalid_credentials().into());
        }
        let name = name.ok_or_else(invalid_credentials)?;
        let token = new_token_for(store.layout(), &name);
        store.create_session(&token_hash(&token), &name).await?;
        Ok(token)
    }

    /// Revokes the request's token; false when there was no valid one.
    pub async fn log_out(&self) -> Result<bool> {
        match self.session.token() {
            Some(token) => Ok(self.app.store.delete_session(&token_hash(token)).await?),
            None => Ok(false),
        }
    }
}

/// What a failed logIn answers, whichever rule the credentials broke.
pub(crate) fn invalid_credentials() -> AppError {
    AppError::Unauthenticated("invalid name or password")
}
