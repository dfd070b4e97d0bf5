-- Indexes existing accounts by their folded names (see
-- scripts/accounts.rs): each folded name goes to its oldest account.
-- ARGV: the accounts' key prefix, then pairs of (name, folded name).
local by_folded, prefix = KEYS[1], ARGV[1]
local indexed = 0
local function created(name)
  return tonumber(redis.call('HGET', prefix .. name, 'created') or '0') or 0
end
for i = 2, #ARGV, 2 do
  local name, folded = ARGV[i], ARGV[i + 1]
  local current = redis.call('HGET', by_folded, folded)
  local older = not current
  if current and current ~= name then
    local a, b = created(name), created(current)
    older = a < b or (a == b and name < current)
  end
  if older then
    redis.call('HSET', by_folded, folded, name)
    indexed = indexed + 1
  end
end
return {'indexed', indexed}
