-- ratelimitd: leases (library file, after rates.lua; used by request.lua; mirrors
-- src/limiter/algorithm/lease.rs).
--
-- KEYS: none of its own; request.lua passes one counter key per lease, as for a request.
-- ARGV: none of its own; request.lua passes now (µs), the rate table entry, want (hits wanted),
--       min (fewest hits worth granting) and period (µs a token_bucket or gcra lease lasts), from
--       a lease spec (see request.lua's header).
-- Returns: granted > 0 (1/0), the hits granted, and µs until the lease ends (hits granted: the
--          window's end, or the period) or until `min` hits could be granted (none granted).
--
-- A lease's hits are charged when granted: the window algorithms' by their commit at now (the
-- lease ends with the window), token_bucket's and gcra's as if spent at now + period, by the
-- module's `lease` (see lease.rs for why and docs/leases.md for the proofs). sliding_window_log and
-- envoyproxy/ratelimit's counters cannot be leased: an error for that lease alone.

local function grant_lease(key, now, rate, want, min, period)
  local algorithm, limit, window, burst, interval = rate[1], rate[2], rate[3], rate[4], rate[5]
  if not algorithm.leased_by_window and not algorithm.lease then
    error('ERR ratelimitd: this counter cannot be leased', 0)
  end
  if want > burst then
    want = burst
  end
  if min > want then
    min = want
  end
  if min < 1 then
    min = 1
  end
  if period < 1 then
    period = 1
  end
  local state = algorithm.load(key, now, window)
  local _, available = algorithm.evaluate(state, now, limit, window, burst, 0, interval)
  local hits = math_min(want, available)
  if hits == 0 or hits < min then
    local _, _, reset_after = algorithm.evaluate(state, now, limit, window, burst, min, interval)
    if reset_after < 1 then
      reset_after = 1
    end
    return 0, 0, u64_reply(reset_after)
  end
  if algorithm.lease then
    algorithm.lease(key, state, now, limit, window, burst, hits, interval, period)
    return 1, hits, period
  end
  algorithm.commit(key, state, now, limit, window, burst, hits, interval)
  return 1, hits, window_start_us(window, now) + window - now
end
