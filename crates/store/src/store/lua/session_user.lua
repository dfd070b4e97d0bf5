-- Who a session is now (see lib/session.lua and scripts/accounts.rs).
-- KEYS: [1] the session. ARGV: [1] the user key prefix on this shard.
-- Answers {'none'}, or session_user's answer.
return session_user(KEYS[1], ARGV[1]) or {'none'}
