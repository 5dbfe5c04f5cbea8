-- ratelimitd: fixed window (library file; mirrors src/limiter/algorithm/fixed_window.rs).
--
-- KEYS: none of its own; request.lua and refund.lua pass one counter key,
--       rl1:{tag}:fixed_window:<W>:<identity>.
-- ARGV: none of its own; request.lua passes now (µs), L, W (µs), n (hits, cumulative per key);
--       refund.lua also the instant the refunded hits were committed at.
-- State: a string "<window_start_us>:<count>", worthless from the window end on (expiry: common.lua).
-- Returns (evaluate): admitted (boolean), remaining (integer), reset_after_us (integer).
-- Returns (refund): whether the key changed (boolean).
--
-- Admits when c + n <= L; remaining L - c after; resets at the window end either way. A refund
-- takes n back from the count of the commit instant's window (exact: counts add up).

-- The module is built by a constructor, called by the entry point (request.lua, refund.lua) once
-- per call and only when the call has a rate of this algorithm: Redis runs the whole script on
-- every EVALSHA, and each function definition it meets makes a closure (defining all five
-- algorithms on every call cost ~24 000 redis-server instructions, a sixth of a one-request call;
-- callgrind).
local function new_fixed_window()
  local fixed_window = {}

  -- Parsed state or nil (absent or unreadable counts as absent).
  function fixed_window.load(key)
    local raw = redis_call('GET', key)
    if not raw then
      return nil
    end
    local start, count = string_match(raw, '^(%d+):(%d+)$')
    if not start then
      return nil
    end
    return { window_start_us = tonumber(start), count = tonumber(count) }
  end

  local function current_count(state, window_start)
    if state and state.window_start_us == window_start then
      return state.count
    end
    return 0
  end

  function fixed_window.evaluate(state, now, limit, window, _burst, hits, _interval)
    local window_start = window_start_us(window, now)
    local count = current_count(state, window_start)
    local admitted = count + hits <= limit
    local after = count
    if admitted then
      after = count + hits
    end
    local remaining = limit - after
    if remaining < 0 then
      remaining = 0
    end
    return admitted, remaining, window_start + window - now
  end

  function fixed_window.commit(key, state, now, _limit, window, _burst, hits, _interval)
    local window_start = window_start_us(window, now)
    local count = current_count(state, window_start) + hits
    write_state(key, int_str(window_start) .. ':' .. int_str(count), window_start + window,
      state and state.window_start_us + window, now)
  end

  -- "<window start>:" of each window of this call, by its start (the module lives one call).
  local prefixes = {}

  -- The verdict of a request of this one check (request.lua), the general rule reduced to "write
  -- when admitted": admitted 1/0, remaining, reset_after_us; or, alone, the message of a Redis
  -- error (then nothing was written). `rate` is the call's rate table entry, `hits` unclamped.
  function fixed_window.decide_one(key, now, rate, hits)
    local limit, window, burst = rate[2], rate[3], rate[4]
    if hits > burst then
      hits = burst + 1
    end
    local raw = redis_pcall('GET', key)
    local window_start = now - math_fmod(now, window)
    local count, stored_end = 0, nil
    if raw then
      if type(raw) ~= 'string' then
        return pcall_error(raw)
      end
      local start, stored_count = string_match(raw, '^(%d+):(%d+)$')
      if start then
        start = tonumber(start)
        stored_end = start + window
        if start == window_start then
          count = tonumber(stored_count)
        end
      end
    end
    local reset_after = window_start + window - now
    local after = count + hits
    if after > limit then
      local remaining = limit - count
      if remaining < 0 then
        remaining = 0
      end
      return 0, remaining, reset_after
    end
    if hits > 0 then
      local prefix = prefixes[window_start]
      if not prefix then
        prefix = int_str(window_start) .. ':'
        prefixes[window_start] = prefix
      end
      -- `after` is at most L (a u32): Lua's own number-to-text conversion (%.14g) writes it in
      -- plain digits.
      local failed = try_write_state(key, prefix .. after, window_start + window, stored_end, now)
      if failed then
        return failed
      end
    end
    return 1, limit - after, reset_after
  end

  -- A count of another window than the commit's holds none of the hits, and one whose window has
  -- ended counts nothing any more: both are left alone. A count down to 0 is deleted (as absent).
  function fixed_window.refund(key, state, committed_at, now, _limit, window, _burst, hits,
      _interval)
    if not state or hits == 0 then
      return false
    end
    local window_start = state.window_start_us
    local expires_at = window_start + window
    if window_start ~= window_start_us(window, committed_at) or expires_at <= now then
      return false
    end
    local count = state.count - hits
    if count > 0 then
      write_state(key, int_str(window_start) .. ':' .. int_str(count), expires_at, expires_at, now)
    else
      redis_call('DEL', key)
    end
    return true
  end

  return fixed_window
end
