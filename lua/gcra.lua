-- ratelimitd: GCRA (library file; mirrors src/limiter/algorithm/gcra.rs).
--
-- KEYS: none of its own; request.lua and refund.lua pass one counter key,
--       rl1:{tag}:gcra:<W>:<identity>.
-- ARGV: none of its own; request.lua passes now (µs), B (burst), n (hits, cumulative per key) and
--       T (emission interval µs, computed by Rust as ceil(W / L), at least 1); refund.lua also
--       the instant the refunded hits were committed at and the counter's debt (µs) just before.
-- State: a string "<tat_us>" (theoretical arrival time), worthless from TAT on (expiry: common.lua); loaded
--        as the bare number (no table: the state is one value).
-- Returns (evaluate): admitted (boolean), remaining (integer), reset_after_us (integer).
-- Returns (refund): whether the key changed (boolean).
--
-- Admits when max(TAT, now) + n*T - now <= B*T. A refund of n committed at t0 on a debt d moves
-- TAT back by n*T - max(0, now - t0 - d) when positive (never more permissive than not reserving:
-- the proof is on `refund` in gcra.rs). All integers (exact below 2^53).

-- The module is built by a constructor, called by the entry point (request.lua, refund.lua) once
-- per call and only when the call has a rate of this algorithm: Redis runs the whole script on
-- every EVALSHA, and each function definition it meets makes a closure (defining all five
-- algorithms on every call cost ~24 000 redis-server instructions, a sixth of a one-request call;
-- callgrind).
local function new_gcra()
  local gcra = {}

  -- The TAT, or nil when absent or unreadable (a non-integer, negative or beyond 2^53 counts as
  -- absent; `tonumber` and three comparisons cost less than matching a pattern first).
  function gcra.load(key)
    local tat = tonumber(redis_call('GET', key))
    if not tat or tat < 0 or tat >= TWO_POW_53 or tat ~= math_floor(tat) then
      return nil
    end
    return tat
  end

  -- max(TAT, now) and the integer divisions are written out (math_floor(a / b) is exact for
  -- non-negative integers below 2^53, see common.lua): a Lua helper function per use cost more
  -- than the arithmetic it wraps (callgrind).
  function gcra.evaluate(tat, now, _limit, _window, burst, hits, interval)
    local capacity = burst * interval
    local debt = 0
    if tat and tat > now then
      debt = tat - now
    end
    local spare = capacity - debt
    if spare < 0 then
      spare = 0
    end
    if hits > burst then
      return false, math_floor(spare / interval), debt
    end
    local new_debt = debt + hits * interval
    if new_debt <= capacity then
      return true, math_floor((capacity - new_debt) / interval), new_debt
    end
    return false, math_floor(spare / interval), new_debt - capacity
  end

  -- The verdict of a request of this one check (request.lua): load, evaluate and commit above
  -- in one function, the general rule reduced to "write when admitted": admitted 1/0,
  -- remaining, reset_after_us; or, alone, the message of a Redis error (then nothing was
  -- written). `rate` is the call's rate table entry, `hits` unclamped.
  function gcra.decide_one(key, now, rate, hits)
    local burst, interval = rate[4], rate[5]
    local raw = redis_pcall('GET', key)
    local tat
    if raw then
      if type(raw) ~= 'string' then
        return pcall_error(raw)
      end
      tat = tonumber(raw)
      if not tat or tat < 0 or tat >= TWO_POW_53 or tat ~= math_floor(tat) then
        tat = nil
      end
    end
    local capacity = burst * interval
    local debt = 0
    if tat and tat > now then
      debt = tat - now
    end
    if hits > burst then
      local spare = capacity - debt
      if spare < 0 then
        spare = 0
      end
      return 0, math_floor(spare / interval), debt
    end
    local new_debt = debt + hits * interval
    if new_debt > capacity then
      local spare = capacity - debt
      if spare < 0 then
        spare = 0
      end
      return 0, math_floor(spare / interval), new_debt - capacity
    end
    if hits > 0 then
      local new_tat = now + new_debt
      local failed = try_write_state(key, string_format('%d', new_tat), new_tat, tat, now)
      if failed then
        return failed
      end
    end
    return 1, math_floor((capacity - new_debt) / interval), new_debt
  end

  function gcra.commit(key, stored_tat, now, _limit, _window, _burst, hits, interval)
    local tat = stored_tat
    if not tat or tat < now then
      tat = now
    end
    tat = tat + hits * interval
    write_state(key, int_str(tat), tat, stored_tat, now)
  end

  -- A lease of `hits` granted at now and lasting `period`, charged as if spent at its end
  -- (lease.lua): TAT := max(TAT, now + period) + n*T, its expiry counted from the real now.
  function gcra.lease(key, stored_tat, now, _limit, _window, _burst, hits, interval, period)
    local tat = stored_tat
    if not tat or tat < now + period then
      tat = now + period
    end
    tat = tat + hits * interval
    write_state(key, int_str(tat), tat, stored_tat, now)
  end

  -- A now before the commit's (a promoted replica's clock) counts as the commit's. A TAT already
  -- at or before now is worthless and left alone; one refunded to at or before now is deleted.
  function gcra.refund(key, stored_tat, committed_at, now, _limit, _window, _burst, hits, interval,
      debt_before)
    if not stored_tat or stored_tat <= now then
      return false
    end
    local kept = 0
    if now > committed_at + debt_before then
      kept = now - committed_at - debt_before
    end
    local give_back = hits * interval - kept
    if give_back <= 0 then
      return false
    end
    local tat = stored_tat - give_back
    if tat <= now then
      redis_call('DEL', key)
    else
      write_state(key, int_str(tat), tat, stored_tat, now)
    end
    return true
  end

  return gcra
end
