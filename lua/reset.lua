-- ratelimitd: deletes the stored state of one counter (POST /counters/reset), so that its next
-- request starts as on a counter never used. A side script of its own (one call per counter, not
-- batched): resets are rare operator actions.
--
-- KEYS[1]: the counter's key as the request script gets it: [<prefix>]rl1:{<tag>}:<algorithm>:
--          <window_us>:<identity>, or an envoyproxy/ratelimit-format key (which names its window
--          itself).
-- ARGV[1]: W, the window in µs, for a ratelimitd fixed window, whose count lives under KEYS[1] +
--          '@<window index>' (fixed_window.lua): the current window's key and the previous one's
--          are deleted, the window picked by Redis's clock as the request script picks it; 0 for
--          every other counter, whose state is KEYS[1] itself.
-- ARGV[2]: optional, µs pinning the time instead of Redis's clock (tests).
-- Returns: the number of keys deleted.
-- Every key it deletes shares KEYS[1]'s hash tag, so the Redis Cluster node that owns KEYS[1] owns
-- them all.

local key = KEYS[1]
local window = tonumber(ARGV[1])
if not window or window < 0 or window ~= math.floor(window) then
  return redis.error_reply('ERR ratelimitd reset: ARGV[1] must be a window in µs or 0')
end
if window == 0 then
  return redis.call('DEL', key)
end
local now
if ARGV[2] and ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
  if not now then
    return redis.error_reply('ERR ratelimitd reset: ARGV[2] must be µs')
  end
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local index = math.floor(now / window)
return redis.call('DEL', key .. '@' .. string.format('%d', index),
  key .. '@' .. string.format('%d', index - 1))
