-- ratelimitd: sliding window counter (library file; mirrors
-- src/limiter/algorithm/sliding_window_counter.rs).
--
-- KEYS: none of its own; request.lua and refund.lua pass one counter key,
--       rl1:{tag}:sliding_window_counter:<W>:<identity>.
-- ARGV: none of its own; request.lua passes now (µs), L, W (µs), n (hits, cumulative per key);
--       refund.lua also the instant the refunded hits were committed at.
-- State: a string "<window_start_us>:<previous>:<current>", worthless from window start + 2W on,
--        or from window start + W when a refund left a current count of 0 (expiry: common.lua).
-- Returns (evaluate): admitted (boolean), remaining (integer), reset_after_us (integer).
-- Returns (refund): whether the key changed (boolean).
--
-- est = p*(1 - elapsed/W) + c, with the Rust f64 operations in the same order. A refund takes n
-- back from the count that holds the commit instant's window (exact: counts add up).

-- The module is built by a constructor, called by the entry point (request.lua, refund.lua) once
-- per call and only when the call has a rate of this algorithm: Redis runs the whole script on
-- every EVALSHA, and each function definition it meets makes a closure (defining all five
-- algorithms on every call cost ~24 000 redis-server instructions, a sixth of a one-request call;
-- callgrind).
local function new_sliding_window_counter()
  local sliding_window_counter = { leased_by_window = true }

  function sliding_window_counter.load(key)
    local raw = redis_call('GET', key)
    if not raw then
      return nil
    end
    local start, previous, current = string_match(raw, '^(%d+):(%d+):(%d+)$')
    if not start then
      return nil
    end
    return {
      window_start_us = tonumber(start),
      previous = tonumber(previous),
      current = tonumber(current),
    }
  end

  -- (previous, current) as seen from the window starting at `window_start`.
  local function counts(state, window, window_start)
    if state then
      if state.window_start_us == window_start then
        return state.previous, state.current
      end
      if state.window_start_us + window == window_start then
        return state.current, 0
      end
    end
    return 0, 0
  end

  -- From this instant on the state decides like an absent one (expires_at_us in Rust).
  local function expires_at(state, window)
    if state.current > 0 then
      return state.window_start_us + 2 * window
    end
    if state.previous > 0 then
      return state.window_start_us + window
    end
    return state.window_start_us
  end

  local function estimate(previous, current, elapsed, window)
    return previous * (1.0 - elapsed / window) + current
  end

  -- µs from now until est + hits <= L, for hits <= L.
  local function wait_until_admissible(limit, window, previous, current, elapsed, hits)
    local wanted = hits
    local excess = estimate(previous, current, elapsed, window) + wanted - limit
    if previous > 0 then
      local wait = as_u64(math_ceil(excess * window / previous))
      if elapsed + wait < window then
        return wait
      end
    end
    local to_next = window - elapsed
    if current + wanted <= limit then
      return to_next
    end
    local into_next = as_u64(math_ceil((current + wanted - limit) * window / current))
    return to_next + math_min(into_next, window)
  end

  function sliding_window_counter.evaluate(state, now, limit, window, _burst, hits, _interval)
    local window_start = window_start_us(window, now)
    local elapsed = now - window_start
    local previous, current = counts(state, window, window_start)
    local est = estimate(previous, current, elapsed, window)
    local window_end = window - elapsed
    if est + hits <= limit then
      local after = estimate(previous, current + hits, elapsed, window)
      return true, as_u32(math_max(math_floor(limit - after), 0)), window_end
    end
    local reset_after
    if hits > limit then
      reset_after = window_end
    else
      reset_after = wait_until_admissible(limit, window, previous, current, elapsed, hits)
    end
    return false, as_u32(math_max(math_floor(limit - est), 0)), reset_after
  end

  function sliding_window_counter.commit(key, state, now, _limit, window, _burst, hits, _interval)
    local window_start = window_start_us(window, now)
    local previous, current = counts(state, window, window_start)
    write_state(key,
      int_str(window_start) .. ':' .. int_str(previous) .. ':' .. int_str(current + hits),
      window_start + 2 * window, state and expires_at(state, window), now)
  end

  -- The current count while the stored window is the commit's, the previous one once it has
  -- rolled over by one; any other window holds none of the hits, and a state already worthless at
  -- now is left alone. What is left is deleted when worthless at now.
  function sliding_window_counter.refund(key, state, committed_at, now, _limit, window, _burst,
      hits, _interval)
    if not state or hits == 0 then
      return false
    end
    local stored_expires_at = expires_at(state, window)
    if stored_expires_at <= now then
      return false
    end
    local window_start = window_start_us(window, committed_at)
    local refunded = {
      window_start_us = state.window_start_us,
      previous = state.previous,
      current = state.current,
    }
    if state.window_start_us == window_start then
      refunded.current = math_max(state.current - hits, 0)
    elseif state.window_start_us == window_start + window then
      refunded.previous = math_max(state.previous - hits, 0)
    end
    if refunded.previous == state.previous and refunded.current == state.current then
      return false
    end
    local refunded_expires_at = expires_at(refunded, window)
    if refunded_expires_at <= now then
      redis_call('DEL', key)
    else
      write_state(key, int_str(refunded.window_start_us) .. ':' .. int_str(refunded.previous) .. ':'
        .. int_str(refunded.current), refunded_expires_at, stored_expires_at, now)
    end
    return true
  end

  return sliding_window_counter
end
