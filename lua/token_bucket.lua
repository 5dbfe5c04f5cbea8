-- ratelimitd: token bucket (library file; mirrors src/limiter/algorithm/token_bucket.rs).
--
-- KEYS: none of its own; request.lua and refund.lua pass one counter key,
--       rl1:{tag}:token_bucket:<W>:<identity>.
-- ARGV: none of its own; request.lua passes now (µs), L, W (µs), B (capacity), n (hits,
--       cumulative); refund.lua also the instant the refunded hits were committed at and how far
--       (µs) from full the bucket was just before.
-- State: a string "<tokens>:<last_us>", tokens written with %.17g so the double round-trips exactly;
--        worthless once full again (expiry: common.lua; always rewritten, as that instant depends
--        on the rate too).
-- Returns (evaluate): admitted (boolean), remaining (integer), reset_after_us (integer).
-- Returns (refund): whether the key changed (boolean).
--
-- Capacity B, refilled at L tokens per W, continuously. A refund of n committed at t0 on a bucket
-- d µs from full adds n - max(0, now - t0 - d)*L/W tokens when positive (GCRA's refund on the
-- deficit, see token_bucket.rs).
-- Every floating-point expression below is the Rust expression with the same operations in the
-- same order (identical IEEE results).

-- The module is built by a constructor, called by the entry point (request.lua, refund.lua) once
-- per call and only when the call has a rate of this algorithm: Redis runs the whole script on
-- every EVALSHA, and each function definition it meets makes a closure (defining all five
-- algorithms on every call cost ~24 000 redis-server instructions, a sixth of a one-request call;
-- callgrind).
local function new_token_bucket()
  local token_bucket = {}

  function token_bucket.load(key)
    local raw = redis_call('GET', key)
    if not raw then
      return nil
    end
    local tokens, last = string_match(raw, '^([^:]+):(%d+)$')
    tokens = tonumber(tokens)
    if not tokens then
      return nil
    end
    return { tokens = tokens, last_us = tonumber(last) }
  end

  -- min(B, tokens + elapsed*L/W); a full bucket when absent.
  local function tokens_at(state, now, limit, window, burst)
    local capacity = burst
    if not state then
      return capacity
    end
    local elapsed = now - state.last_us
    if elapsed < 0 then
      elapsed = 0
    end
    local refilled = state.tokens + elapsed * limit / window
    return math_min(refilled, capacity)
  end

  -- µs to refill `missing` tokens, rounded up.
  local function refill_time_us(limit, window, missing)
    if missing <= 0 then
      return 0
    end
    return as_u64(math_ceil(missing * window / limit))
  end

  function token_bucket.evaluate(state, now, limit, window, burst, hits, _interval)
    local capacity = burst
    local tokens = tokens_at(state, now, limit, window, burst)
    local wanted = hits
    if hits <= burst and tokens >= wanted then
      local after = tokens - wanted
      return true, as_u32(math_floor(after)), refill_time_us(limit, window, capacity - after)
    end
    local missing
    if hits > burst then
      missing = capacity - tokens
    else
      missing = wanted - tokens
    end
    return false, as_u32(math_floor(tokens)), refill_time_us(limit, window, missing)
  end

  function token_bucket.commit(key, state, now, limit, window, burst, hits, _interval)
    local tokens = tokens_at(state, now, limit, window, burst) - hits
    local expires_at = now + refill_time_us(limit, window, burst - tokens)
    write_state(key, string_format('%.17g', tokens) .. ':' .. int_str(now), expires_at, nil, now)
  end

  -- A lease of `hits` granted at now and lasting `period` (lease.lua): min(tokens, B -
  -- period*L/W) - n tokens at now, below zero when the refill must first pay a debt.
  function token_bucket.lease(key, state, now, limit, window, burst, hits, _interval, period)
    local ceiling = burst - period * limit / window
    local tokens = math_min(tokens_at(state, now, limit, window, burst), ceiling) - hits
    local expires_at = now + refill_time_us(limit, window, burst - tokens)
    write_state(key, string_format('%.17g', tokens) .. ':' .. int_str(now), expires_at, nil, now)
  end

  -- Refills to t1 = max(now, t0) as evaluate does. A now before the commit's (a promoted
  -- replica's clock) counts as the commit's. A bucket already full at now is left alone; one
  -- refunded to full is deleted (as absent).
  function token_bucket.refund(key, state, committed_at, now, limit, window, burst, hits, _interval,
      debt_before)
    if not state or state.last_us + refill_time_us(limit, window, burst - state.tokens) <= now then
      return false
    end
    local at = now
    if at < committed_at then
      at = committed_at
    end
    local kept = 0
    if at - committed_at > debt_before then
      kept = at - committed_at - debt_before
    end
    local give_back = hits - kept * limit / window
    if give_back <= 0 then
      return false
    end
    local tokens = tokens_at(state, at, limit, window, burst) + give_back
    if tokens >= burst then
      redis_call('DEL', key)
      return true
    end
    local last = state.last_us
    if last < at then
      last = at
    end
    if tokens == state.tokens and last == state.last_us then
      return false
    end
    local expires_at = last + refill_time_us(limit, window, burst - tokens)
    write_state(key, string_format('%.17g', tokens) .. ':' .. int_str(last), expires_at, nil, now)
    return true
  end

  return token_bucket
end
