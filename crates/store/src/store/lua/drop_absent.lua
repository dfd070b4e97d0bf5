-- Drops from the net-vote rankings one batch of the articles no longer in
-- the time ranking (see scripts/derive.rs): after time: or score: was
-- deleted or replaced as a whole (a restore, the book's test cleanup),
-- articles gone from the book's rankings leave the TOP_* orders too.
-- KEYS[2..6] are the site's net-vote rankings, the all-time one last.
local by_time = KEYS[1]
local scan = redis.call('ZSCAN', KEYS[6], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local dropped = 0
local items = scan[2]
for i = 1, #items, 2 do
  local article = items[i]
  if not redis.call('ZSCORE', by_time, article) then
    for k = 2, 6 do redis.call('ZREM', KEYS[k], article) end
    dropped = dropped + 1
  end
end
return {'dropped', scan[1], dropped}
