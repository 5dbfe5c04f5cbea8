-- ratelimitd: sliding window log (library file; mirrors src/limiter/algorithm/sliding_window_log.rs).
--
-- KEYS: none of its own; request.lua and refund.lua pass one counter key,
--       rl1:{tag}:sliding_window_log:<W>:<identity>.
-- ARGV: none of its own; request.lua passes now (µs), L, W (µs), n (hits, cumulative per key);
--       refund.lua also the instant the refunded hits were committed at.
-- State: a sorted set with one member per admitted hit, score = timestamp µs, member "<ts>:<seq>"
--        (seq numbers the hits recorded at the same ts from 0, so members are unique: a commit
--        numbers its hits on from the count already at ts, and a refund removes the highest
--        numbers, which keeps each timestamp's numbers contiguous). Live hits are those with score
--        in (now - W, +inf) (now - W may be negative); commit prunes (-inf, now - W] with
--        ZREMRANGEBYSCORE.
--        PEXPIRE after every commit, and after a refund that removed the newest hits: worthless
--        once the newest hit leaves the window (expiry steps: common.lua).
-- Returns (evaluate): admitted (boolean), remaining (integer), reset_after_us (integer).
-- Returns (refund): whether the key changed (boolean).
--
-- Memory keeps one (ts, hits) entry per request; here one member per hit: both count the same hits
-- at every instant, and the k-th oldest hit has the same timestamp in both.
-- Evaluation only reads (ZCARD, ZCOUNT, ZRANGE by rank): a denied request writes nothing.

-- The module is built by a constructor, called by the entry point (request.lua, refund.lua) once
-- per call and only when the call has a rate of this algorithm: Redis runs the whole script on
-- every EVALSHA, and each function definition it meets makes a closure (defining all five
-- algorithms on every call cost ~24 000 redis-server instructions, a sixth of a one-request call;
-- callgrind).
local function new_sliding_window_log()
  local sliding_window_log = {}

  -- Hits are added to (and refunds remove them from) the set in chunks of this many members
  -- (bounded Lua stack for unpack).
  local ZADD_CHUNK = 256

  -- A hit at ts is live while now - ts < W, i.e. ts > now - W. The horizon may be negative (now < W):
  -- then every hit is live (Rust compares now - ts with W for the same reason).
  local function horizon_of(now, window)
    return now - window
  end

  -- The state is read lazily: counts now, individual timestamps only when a reset needs them.
  -- Keys of one request share `now` and (being per window) the horizon, so counts are cached.
  function sliding_window_log.load(key, now, window)
    local total = redis_call('ZCARD', key)
    local live = 0
    if total > 0 then
      live = redis_call('ZCOUNT', key, '(' .. int_str(horizon_of(now, window)), '+inf')
    end
    return { key = key, dead = total - live, live = live }
  end

  -- Timestamp of the k-th oldest live hit (1-based). Members at or below the horizon all rank
  -- before the live ones, so the rank is dead + k - 1.
  local function kth_oldest_live(state, k)
    local rank = state.dead + k - 1
    local found = redis_call('ZRANGE', state.key, rank, rank, 'WITHSCORES')
    return tonumber(found[2])
  end

  function sliding_window_log.evaluate(state, now, limit, window, _burst, hits, _interval)
    local count = state.live
    if count + hits <= limit then
      local oldest_leaves
      if count > 0 then
        oldest_leaves = kth_oldest_live(state, 1) + window - now
      elseif hits > 0 then
        oldest_leaves = window
      else
        oldest_leaves = 0
      end
      return true, limit - count - hits, oldest_leaves
    end
    local keep
    if hits > limit then
      keep = 0
    else
      keep = limit - hits
    end
    local remaining = limit - count
    if remaining < 0 then
      remaining = 0
    end
    -- Wait until only `keep` hits remain: the (count - keep)-th oldest hit must leave.
    local reset_after = 0
    if count > keep then
      reset_after = kth_oldest_live(state, count - keep) + window - now
    end
    return false, remaining, reset_after
  end

  -- `state` is what load found at this same `now`: without dead entries there is nothing to trim,
  -- and without live ones no entry has this timestamp yet (it would be live), so both calls are
  -- skipped for a new or fully expired log.
  function sliding_window_log.commit(key, state, now, _limit, window, _burst, hits, _interval)
    if state.dead > 0 then
      redis_call('ZREMRANGEBYSCORE', key, '-inf', int_str(horizon_of(now, window)))
    end
    local ts = int_str(now)
    local seq = 0
    if state.live > 0 then
      seq = redis_call('ZCOUNT', key, ts, ts)
    end
    local added = 0
    while added < hits do
      local args = {}
      local chunk = math_min(hits - added, ZADD_CHUNK)
      for _ = 1, chunk do
        args[#args + 1] = ts
        args[#args + 1] = ts .. ':' .. int_str(seq)
        seq = seq + 1
      end
      redis_call('ZADD', key, unpack(args))
      added = added + chunk
    end
    redis_call('PEXPIRE', key, px_text(math_floor((now + window) / EXPIRY_STEP_US), now))
  end

  -- Removes up to n hits recorded at the commit's instant t0, if still live: the members
  -- "<t0>:<count - 1>" down (a refund that removed others would leave a gap that a later commit at
  -- t0 would number into, overwriting a member: a hit lost). Exact: the hits of the other commits
  -- stay. Redis drops a set left empty; one whose newest hit has left the window is deleted, and
  -- one whose newest hits were the refunded ones expires when its new newest hit leaves.
  function sliding_window_log.refund(key, state, committed_at, now, _limit, window, _burst, hits,
      _interval)
    local horizon = horizon_of(now, window)
    if hits == 0 or state.live == 0 or committed_at <= horizon then
      return false
    end
    local ts = int_str(committed_at)
    local recorded = redis_call('ZCOUNT', key, ts, ts)
    local take = math_min(hits, recorded)
    if take == 0 then
      return false
    end
    local removed = 0
    while removed < take do
      local members = {}
      for _ = 1, math_min(take - removed, ZADD_CHUNK) do
        removed = removed + 1
        members[#members + 1] = ts .. ':' .. int_str(recorded - removed)
      end
      redis_call('ZREM', key, unpack(members))
    end
    local newest = tonumber(redis_call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
    if newest and newest <= horizon then
      redis_call('DEL', key)
    elseif newest and newest < committed_at then
      redis_call('PEXPIRE', key, px_text(math_floor((newest + window) / EXPIRY_STEP_US), now))
    end
    return true
  end

  return sliding_window_log
end
