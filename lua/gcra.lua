-- ratelimitd: GCRA (library file; mirrors src/limiter/algorithm/gcra.rs).
--
-- KEYS: none of its own; request.lua passes one counter key, rl1:{tag}:gcra:<W>:<identity>.
-- ARGV: none of its own; request.lua passes now (µs), B (burst), n (hits, cumulative per key) and
--       T (emission interval µs, computed by Rust as ceil(W / L), at least 1).
-- State: a string "<tat_us>" (theoretical arrival time), PEXPIRE = (TAT - now) + 1000 ms.
-- Returns (evaluate): admitted (boolean), remaining (integer), reset_after_us (integer).
--
-- Admits when max(TAT, now) + n*T - now <= B*T. All integers (exact below 2^53).

-- The module is built by a constructor, called by request.lua once per call and only when the
-- call has a rate of this algorithm: Redis runs the whole script on every EVALSHA, and each
-- function definition it meets makes a closure (defining all five algorithms on every call
-- cost ~24 000 redis-server instructions, a sixth of a one-request call; callgrind).
local function new_gcra()
  local gcra = {}

  function gcra.load(key)
    local raw = redis.call('GET', key)
    if not raw or not string.match(raw, '^%d+$') then
      return nil
    end
    return { tat_us = tonumber(raw) }
  end

  local function base_of(state, now)
    if state then
      return math_max(state.tat_us, now)
    end
    return now
  end

  -- Integer division of non-negative integers below 2^53 (exact: see common.lua).
  local function div(a, b)
    return math_floor(a / b)
  end

  function gcra.evaluate(state, now, _limit, _window, burst, hits, interval)
    local capacity = burst * interval
    local debt = base_of(state, now) - now
    local spare = capacity - debt
    if spare < 0 then
      spare = 0
    end
    if hits > burst then
      return false, div(spare, interval), debt
    end
    local new_debt = debt + hits * interval
    if new_debt <= capacity then
      return true, div(capacity - new_debt, interval), new_debt
    end
    return false, div(spare, interval), new_debt - capacity
  end

  function gcra.commit(key, state, now, _limit, _window, _burst, hits, interval)
    local tat = base_of(state, now) + hits * interval
    redis.call('SET', key, int_str(tat), 'PX', ttl_text(tat, now))
  end

  return gcra
end
