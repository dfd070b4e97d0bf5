-- Karma, shared by the scripts that change it (post, vote).
--
-- Karma scores fold a tie-break into the karma: the integer part
-- is the karma, the fraction is (2^32 - 1 - t) / 2^32 where t is whole
-- seconds since 2020-01-01 when the user reached that karma. An earlier t
-- gives a larger fraction, so a plain ZREVRANGE ranks by karma, then by who
-- got there first. The fraction is a multiple of 2^-32, which a double holds
-- exactly next to any integer below 2^21 in magnitude: +-2,097,151 karma
-- points and 2^32 seconds (136 years, until 2156) keep the order exact.
-- math.floor(score) gives the karma back, negative karma included.
--
-- as_member turns a poster field into the user's member: the book stores
-- whatever id its caller passes, votegraph the user prefix and the name.
local function karma_score(k, now)
  local t = math.floor(now) - 1577836800
  if t < 0 then t = 0 end
  if t > 4294967295 then t = 4294967295 end
  return string.format('%.17g', k + (4294967295 - t) / 4294967296)
end
-- With via_outbox (the cluster layout), karma is the shard's outbox and the
-- change is queued there for the poster's shard (see outbox.rs).
local function add_karma(karma, member, delta, now, via_outbox)
  if delta == 0 then return end
  if via_outbox then
    redis.call('XADD', karma, '*', 'member', member, 'delta', delta, 'at', string.format('%.6f', now))
    return
  end
  local old = redis.call('ZSCORE', karma, member)
  local k = (old and math.floor(tonumber(old)) or 0) + delta
  redis.call('ZADD', karma, karma_score(k, now), member)
end
local function as_member(poster, user_prefix)
  if string.sub(poster, 1, #user_prefix) == user_prefix then return poster end
  return user_prefix .. poster
end
