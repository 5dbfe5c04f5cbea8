-- ratelimitd: refunds of reservations (the entry point of the refund script).
--
-- A request whose checks live on several Redis Cluster nodes is decided on each node in parallel,
-- one call of the request script per node; when any node denies, what the nodes that admitted
-- committed for it is taken back with this script, one call per node, so that a denied request
-- consumes nothing anywhere. The store runs it as request.lua is run (the library files before
-- it; its chunk returns `refund_call`, called with the call's KEYS and ARGV: a function of the
-- library, or a script of its own).
--
-- KEYS: the keys to refund, each once (a key listed twice is refunded twice),
--       [<prefix>]rl1:{<tag>}:<algorithm>:<window_us>:<identity> (for a fixed window, the count
--       of the commit's window is under this key + '@<window index>'), or envoyproxy/ratelimit's keys
--       (code 6 only: a code-5 counter counts a denied request's hits, and is never refunded). In
--       a Redis Cluster call, KEYS is empty and these keys lead ARGV instead, after their count
--       (see keys_and_arguments, common.lua).
-- ARGV: the rate table exactly as request.lua's: R (their number, at least 1), then 5 values per
--       rate (code, L, W, B, T: see request.lua); then
--         now           '-' for Redis's own clock (TIME), as production sends; tests pin time with
--                       µs digits
--       then 4 values per key, in the order of KEYS:
--         rate          the rate the key was committed with: its position (1-based) in the table
--         n             the hits that commit added to the key (its total, at most B; 0 refunds
--                       nothing)
--         committed_at  the `now` (µs) of the call that committed them
--         debt_before   for token_bucket and gcra, how far (µs) from full the counter was just
--                       before that commit, as its verdict told (0 is always safe; see
--                       debt_before_us in src/limiter/algorithm/mod.rs); 0 for the others
-- Returns: the number of keys whose state changed (integer).
--          A layout that does not add up (not 4 values per key, an invalid rate, a rate position
--          outside the table, an n beyond its rate's B, a value that is not a whole number) is an
--          error reply, and nothing is changed. Every key is touched before the first is
--          refunded, so a key the node does not own (a cluster slot that moved) fails the call
--          before it changes anything. An error raised by Redis while refunding (a key of another type...)
--          is an error reply after the keys before it were refunded: a refund is never retried on
--          an error other than NOSCRIPT, since one applied twice would give back hits the request
--          never took.
--
-- Whatever other requests committed in between, a refunded key is never more permissive than it
-- would be had the reservation never happened; see `refund` in src/limiter/algorithm/mod.rs.

local FIELDS = 4

-- A whole number from decimal text, below 2^53 (exact in a double), or nil.
local function whole(text)
  local x = tonumber(text)
  if not x or x < 0 or x >= TWO_POW_53 or x ~= math_floor(x) then
    return nil
  end
  return x
end

-- The entry point: refunds what the call's arguments say (see above), its keys `declared` (KEYS)
-- or, on a cluster node, leading the `given` arguments (ARGV; see common.lua).
local function refund_call(declared, given)
  start_call()
  local KEYS, ARGV = keys_and_arguments(declared, given)

  local rate_count = whole(ARGV[1])
  if not rate_count or rate_count < 1 or 2 + rate_count * RATE_FIELDS + #KEYS * FIELDS ~= #ARGV then
    return redis.error_reply('ERR ratelimitd: malformed refund (' .. #KEYS .. ' keys, ' .. #ARGV
      .. ' arguments)')
  end

  -- { algorithm, L, W, B, T } per rate, validated as request.lua does.
  local rates = {}
  for r = 1, rate_count do
    rates[r] = read_rate(ARGV, r)
    if not rates[r] then
      return redis.error_reply('ERR ratelimitd: invalid rate ' .. r)
    end
  end

  local now_index = 2 + rate_count * RATE_FIELDS
  local now
  if ARGV[now_index] == '-' then
    local time = redis_call('TIME')
    now = tonumber(time[1]) * 1000000 + tonumber(time[2])
  else
    now = whole(ARGV[now_index])
    if not now then
      return redis.error_reply('ERR ratelimitd: invalid pinned time')
    end
  end

  -- Every key's values are checked before the first one is refunded: 4 per key (rate, n,
  -- committed_at, debt_before), flat (no table per key).
  local refunds = {}
  for i = 1, #KEYS do
    local base = now_index + (i - 1) * FIELDS
    local rate = rates[whole(ARGV[base + 1])]
    local hits = whole(ARGV[base + 2])
    local committed_at = whole(ARGV[base + 3])
    local debt_before = whole(ARGV[base + 4])
    if not rate or not hits or hits > rate[4] or not committed_at or not debt_before then
      return redis.error_reply('ERR ratelimitd: invalid arguments for refund ' .. i)
    end
    local at = (i - 1) * FIELDS
    refunds[at + 1] = rate
    refunds[at + 2] = hits
    refunds[at + 3] = committed_at
    refunds[at + 4] = debt_before
  end

  -- Every key is touched before the first is refunded: on a cluster node, a key the node does not
  -- own (its slot moved) fails the call here, before anything changed.
  for i = 1, #KEYS do
    redis_call('EXISTS', KEYS[i])
  end

  -- A key listed twice is refunded twice, each time from the state the previous refund left.
  local changed = 0
  for i = 1, #KEYS do
    local at = (i - 1) * FIELDS
    local rate, hits, committed_at, debt_before = refunds[at + 1], refunds[at + 2], refunds[at + 3],
      refunds[at + 4]
    local algorithm, limit, window, burst, interval = rate[1], rate[2], rate[3], rate[4], rate[5]
    local key = KEYS[i]
    local state = algorithm.load(key, now, window)
    if algorithm.refund(key, state, committed_at, now, limit, window, burst, hits, interval,
        debt_before) then
      changed = changed + 1
    end
  end
  return changed
end

return refund_call
