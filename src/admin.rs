//! What `votegraph` runs instead of the server: `set-role`, which makes
//! the first admin (or changes any role) from the command line, on the
//! Redis the servers use, found as they find it (REDIS_URL, Sentinel or
//! REDIS_CLUSTER_NODES; without them, the Redis a server runs in the data
//! directory).
//! Servers running on that Redis see the change at the user's next
//! request; the log records it as SET_ROLE, with no moderator.

use std::time::Duration;

use anyhow::Context as _;

use crate::config::{Command, Settings};
use crate::domain::{Role, UserName};
use crate::local_redis;
use crate::store::{Actor, Locator, Store, UserAction};

/// Runs `command`; an error ends the process with a non-zero status.
pub async fn run(command: Command, settings: &Settings) -> anyhow::Result<()> {
    let Command::SetRole { name, role } = command;
    let timeout = Duration::from_millis(settings.redis_timeout_ms.max(1));
    let locator = match settings.configured_redis(timeout)? {
        Some(locator) => locator,
        None => Locator::url(&local_redis::running_url(&settings.data_dir).await?)?,
    };
    let store = Store::new(locator, 1, timeout, timeout, None)?
        .with_moderation(settings.moderation())
        .open_keyspace(settings.cluster_shards)
        .await?;
    let unknown = || format!("no user named {name:?}");
    let typed = UserName::parse(&name).with_context(unknown)?;
    let (user, _) = store.account(&typed).await?.with_context(unknown)?;
    let reason = format!("set to {}", role.as_str());
    let action = UserAction::SetRole(role);
    let actor = Actor {
        name: None,
        role: Role::Admin,
        reason: Some(&reason),
        limit: None,
    };
    let changed = store.moderate_user(&actor, &user, action).await?;
    let verb = if changed { "is now" } else { "was already" };
    println!("{} {verb} {}", user.as_str(), role.as_str());
    Ok(())
}
