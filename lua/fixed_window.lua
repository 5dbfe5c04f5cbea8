-- ratelimitd: fixed window (library file; mirrors src/limiter/algorithm/fixed_window.rs).
--
-- KEYS: none of its own; request.lua and refund.lua pass one base key per counter,
--       rl1:{tag}:fixed_window:<W>:<identity>, which this file never writes itself: a window's
--       count lives under the base key followed by `@<window index>` (floor(start / W), see
--       window_counter_key). An identity never holds `@` (it is percent-encoded), so the suffix
--       keeps keys injective; it shares the base key's hash tag, so a cluster node that owns the
--       base key owns every window's key.
-- ARGV: none of its own; request.lua passes now (µs), L, W (µs), n (hits, cumulative per key);
--       refund.lua also the instant the refunded hits were committed at.
-- State: the window's count, a plain integer (Redis stores it as one); worthless from the window
--        end on, when the key expires (0.5-1 s later: common.lua) and the next window starts
--        under a key of its own. A value that is no count (not an integer, negative, 2^53 or
--        more) counts as absent and is replaced by the next admitted hits; a key of another type
--        is Redis's error (WRONGTYPE) for the request.
-- Returns (evaluate): admitted (boolean), remaining (integer), reset_after_us (integer).
-- Returns (refund): whether the key changed (boolean).
--
-- Admits when c + n <= L; remaining L - c after; resets at the window end either way. A refund
-- takes n back from the count of the commit instant's window (exact: counts add up).
--
-- A count per window key makes the common request one INCRBY: the one-check path adds its hits
-- first and takes them back (DECRBY, in the same script, so no other request sees them) when the
-- sum is over the limit, where a `<start>:<count>` state under one key took a GET and a SET.

-- The module is built by a constructor, called by the entry point (request.lua, refund.lua) only
-- when the call has a rate of this algorithm: once per call with EVALSHA, which runs the whole
-- script on every call, and once per load of the function library with FCALL. Each function
-- definition it meets makes a closure (defining all five algorithms on every call cost ~24 000
-- redis-server instructions, a sixth of a one-request call; callgrind).
local function new_fixed_window()
  local fixed_window = { leased_by_window = true }

  -- `@<window index>` of the call's latest window of each length, by the length: { start,
  -- suffix }. The checks of a call mostly share their window, and formatting a number costs more
  -- than finding it formatted.
  local suffixes = {}

  -- A new call: the suffixes of the last one are dropped (see start_call in rates.lua).
  function fixed_window.start_call()
    suffixes = {}
  end

  -- The key holding the count of the window of length `window` starting at `window_start`
  -- (a multiple of it) for the counter whose base key is `key`.
  local function window_counter_key(key, window, window_start)
    local cached = suffixes[window]
    if not cached or cached[1] ~= window_start then
      cached = { window_start, '@' .. int_str(window_start / window) }
      suffixes[window] = cached
    end
    return key .. cached[2]
  end

  -- A stored count from its text, or nil for none (absent, or text that is no count).
  local function readable_count(raw)
    local count = tonumber(raw)
    if not count or count < 0 or count >= TWO_POW_53 or count ~= math_floor(count) then
      return nil
    end
    return count
  end

  -- The PX argument of a window's key: it vanishes 0.5-1 s after the window ends.
  local function window_px(window_start, window, now)
    return px_text(math_floor((window_start + window) / EXPIRY_STEP_US), now)
  end

  -- The count of the window containing `now`, as a state (nil when absent or no count), with
  -- the key it was read from, which a commit of the same window writes to.
  function fixed_window.load(key, now, window)
    local window_start = window_start_us(window, now)
    local counter = window_counter_key(key, window, window_start)
    local count = readable_count(redis_call('GET', counter))
    if not count then
      return nil
    end
    return { window_start_us = window_start, count = count, counter = counter }
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

  -- Adds `hits` to a count that was read (INCRBY keeps the key's expiry), or writes it, with the
  -- window's expiry, where there was none (or no count) to add to.
  function fixed_window.commit(key, state, now, _limit, window, _burst, hits, _interval)
    local window_start = window_start_us(window, now)
    if current_count(state, window_start) > 0 then
      redis_call('INCRBY', state.counter, hits)
    else
      redis_call('SET', window_counter_key(key, window, window_start), hits, 'PX',
        window_px(window_start, window, now))
    end
  end

  -- The verdict of a request of this one check (request.lua), the general rule reduced to "write
  -- when admitted": admitted 1/0, remaining, reset_after_us; or, alone, the message of a Redis
  -- error (then nothing was written). `rate` is the call's rate table entry, `hits` unclamped.
  -- Hits that may fit are added at once and taken back when they do not; hits that cannot fit
  -- (n > L) and a check of n = 0 only read.
  function fixed_window.decide_one(key, now, rate, hits)
    local limit, window, burst = rate[2], rate[3], rate[4]
    if hits > burst then
      hits = burst + 1
    end
    local window_start = now - math_fmod(now, window)
    local reset_after = window_start + window - now
    local counter = window_counter_key(key, window, window_start)
    if hits == 0 or hits > limit then
      local raw = redis_pcall('GET', counter)
      local count = 0
      if raw then
        if type(raw) ~= 'string' then
          return pcall_error(raw)
        end
        count = readable_count(raw) or 0
      end
      local remaining = limit - count
      if remaining < 0 then
        remaining = 0
      end
      if hits == 0 and count <= limit then
        return 1, remaining, reset_after
      end
      return 0, remaining, reset_after
    end
    local after = redis_pcall('INCRBY', counter, hits)
    if type(after) ~= 'number' or after < hits or after >= TWO_POW_53 then
      -- No count was stored: text that is no integer (INCRBY refused it, or would overflow), or
      -- a value no count reaches. It counts as absent and is replaced; any other error (a key
      -- of another type...) answers the request, with nothing written.
      if type(after) ~= 'number' then
        local message = pcall_error(after)
        if not (string_match(message, 'not an integer') or string_match(message, 'overflow')) then
          return message
        end
      end
      local set = redis_pcall('SET', counter, hits, 'PX', window_px(window_start, window, now))
      if type(set) == 'table' and set.err then
        return set.err
      end
      return 1, limit - hits, reset_after
    end
    if after > limit then
      -- The count before was over L - n >= 0, so the key keeps a count (and its expiry).
      local before = redis_pcall('DECRBY', counter, hits)
      if type(before) ~= 'number' then
        return pcall_error(before)
      end
      local remaining = limit - before
      if remaining < 0 then
        remaining = 0
      end
      return 0, remaining, reset_after
    end
    if after == hits then
      local set = redis_pcall('PEXPIRE', counter, window_px(window_start, window, now))
      if type(set) ~= 'number' then
        return pcall_error(set)
      end
    end
    return 1, limit - after, reset_after
  end

  -- Hits of a window that has ended count nothing any more: they are left alone. A count down to
  -- 0 is deleted (as absent).
  function fixed_window.refund(key, state, committed_at, now, _limit, window, _burst, hits,
      _interval)
    if hits == 0 then
      return false
    end
    local window_start = window_start_us(window, committed_at)
    if window_start + window <= now then
      return false
    end
    local counter = window_counter_key(key, window, window_start)
    local count
    if window_start == window_start_us(window, now) then
      count = state and state.count
    else
      count = readable_count(redis_call('GET', counter))
    end
    if not count then
      return false
    end
    if count > hits then
      redis_call('DECRBY', counter, hits)
    else
      redis_call('DEL', counter)
    end
    return true
  end

  return fixed_window
end
