-- The group directory's sizes, shared by the scripts that change a group's
-- articles (post, set-groups, moderation). The directory holds minus each
-- size, so the largest group ranks first; a group left with no article
-- leaves it. With via_outbox (the cluster layout), directory is the
-- shard's outbox, and the change is queued for the group's shard (see
-- outbox.rs).
local function resize_group(directory, g, delta, via_outbox)
  if via_outbox then
    redis.call('XADD', directory, '*', 'group', g, 'delta', delta)
    return
  end
  if tonumber(redis.call('ZINCRBY', directory, -delta, g)) >= 0 then
    redis.call('ZREM', directory, g)
  end
end
