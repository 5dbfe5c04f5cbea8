-- ratelimitd: one rate-limit request, decided all or nothing (the entry point of the script).
--
-- The store sends ONE script: common.lua, the five algorithm files and this file, concatenated in
-- that order, loaded once (SCRIPT LOAD) and called with EVALSHA.
--
-- KEYS: the k counter keys, one per check, in request order (repeats allowed: checks that share a
--       counter share its key), rl1:{<tag>}:<algorithm>:<window_us>:<identity>.
-- ARGV: [pinned_now_us] then 7 values per check:
--         code    algorithm: 0 fixed_window, 1 sliding_window_log, 2 sliding_window_counter,
--                 3 token_bucket, 4 gcra
--         L       limit (requests per window)
--         W       window in µs
--         B       burst (capacity; equals L for the window algorithms)
--         n       hits, clamped by Rust to at most 2^32 (more than any B + 1)
--         T       GCRA emission interval in µs (ignored by the other algorithms)
--         shadow  1 for a shadow-mode check (decided and counted, never vetoes), else 0
--       pinned_now_us is present only when #ARGV == 7k + 1; tests pin time with it. Production never
--       sends it: time is then Redis's own (TIME), so hosts with skewed clocks agree.
-- Returns: an array of k arrays {admitted 0/1, remaining, reset_after_us}, in check order; integers
--          (a reset_after_us of 2^63 or more, which only Rust's saturation produces, travels as a
--          decimal string).
--
-- Every check is evaluated first, on the stored state, with the hits of the earlier ADMITTED checks
-- on the same key added (a denied check consumes nothing, so a denied shadow check cannot make a
-- later check of its counter fail). Nothing is written unless every non-shadow check admits; then
-- each distinct key is committed once, with the total hits of its admitted checks and the rate of
-- its last admitted check; a key whose total is 0 is not written.

local ALGORITHMS = {
  [0] = fixed_window,
  [1] = sliding_window_log,
  [2] = sliding_window_counter,
  [3] = token_bucket,
  [4] = gcra,
}

local FIELDS = 7

-- Redis 3.2-4.0 need effects replication to write after TIME; later versions always do it.
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local checks = #KEYS
local offset
local now
if #ARGV == checks * FIELDS + 1 then
  offset = 1
  now = tonumber(ARGV[1])
elseif #ARGV == checks * FIELDS then
  offset = 0
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
else
  return redis.error_reply('ERR ratelimitd: ' .. #ARGV .. ' arguments for ' .. checks .. ' keys')
end
if not now or now < 0 then
  return redis.error_reply('ERR ratelimitd: invalid pinned time')
end

local params = {}
for i = 1, checks do
  local base = offset + (i - 1) * FIELDS
  local p = {
    algorithm = ALGORITHMS[tonumber(ARGV[base + 1])],
    limit = tonumber(ARGV[base + 2]),
    window = tonumber(ARGV[base + 3]),
    burst = tonumber(ARGV[base + 4]),
    hits = tonumber(ARGV[base + 5]),
    interval = tonumber(ARGV[base + 6]),
    shadow = ARGV[base + 7] == '1',
  }
  if not p.algorithm or not p.limit or p.limit < 1 or not p.window or p.window < 1
      or not p.burst or p.burst < 1 or not p.hits or p.hits < 0
      or not p.interval or p.interval < 1 then
    return redis.error_reply('ERR ratelimitd: invalid arguments for check ' .. i)
  end
  params[i] = p
end

-- Evaluate every check on the stored state (each key loaded once), with the hits of the earlier
-- admitted checks on the same key added.
local states = {}
local admitted_hits = {}
local commit_rate = {}
local order = {}
local verdicts = {}
local vetoed = false
for i = 1, checks do
  local key = KEYS[i]
  local p = params[i]
  if admitted_hits[key] == nil then
    states[key] = p.algorithm.load(key, now, p.window) or false
    admitted_hits[key] = 0
    order[#order + 1] = key
  end
  local cumulative = admitted_hits[key] + p.hits
  -- Rust's algorithm::evaluate clamps hits to B + 1 (nothing above it can be admitted).
  local admitted, remaining, reset_after = p.algorithm.evaluate(
    states[key] or nil, now, p.limit, p.window, p.burst, math.min(cumulative, p.burst + 1),
    p.interval)
  if admitted then
    admitted_hits[key] = cumulative
    commit_rate[key] = p
  elseif not p.shadow then
    vetoed = true
  end
  verdicts[i] = { admitted and 1 or 0, remaining, u64_reply(reset_after) }
end

-- All or nothing: commit each distinct key once, with the total hits of its admitted checks.
if not vetoed then
  for _, key in ipairs(order) do
    local total = admitted_hits[key]
    if total > 0 then
      local p = commit_rate[key]
      p.algorithm.commit(key, states[key] or nil, now, p.limit, p.window, p.burst,
        math.min(total, p.burst + 1), p.interval)
    end
  end
end

return verdicts
