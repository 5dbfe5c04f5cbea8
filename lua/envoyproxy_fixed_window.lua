-- ratelimitd: envoyproxy/ratelimit's fixed-window counter, and how a request counts it, for
-- --key-format envoyproxy (library file; the key is built by src/store/redis/scripts/envoyproxy_key.rs).
--
-- KEYS: none of its own; request.lua and refund.lua pass one counter key, exactly as
--       envoyproxy/ratelimit names it: <prefix><domain>_<key>_<value>_..._<window start, Unix s>.
--       The key names its window: its last `_<digits>` are the window's start.
-- ARGV: none of its own; its rate table entry (rates.lua) is code 5 or 6, L, W (µs), B (= L) and,
--       in place of GCRA's T, the TTL in seconds the call's writes set (W plus the expiration
--       jitter, drawn by Rust).
-- State: the key's value as envoyproxy/ratelimit writes it, a plain integer (INCRBY): the hits
--        counted in the key's window. An absent key counts 0.
-- Returns (evaluate): admitted (boolean), remaining (integer), reset_after_us (integer).
-- Returns (refund): whether the key changed (boolean).
--
-- Admits when c + n <= L: envoyproxy/ratelimit denies when the count after its INCRBY is above L,
-- the same test on the same count. Every write is INCRBY then EXPIRE <TTL>, as
-- envoyproxy/ratelimit pipelines them. Which hits a request counts is decide_request's below.
--
-- The constructor has no upvalue (it takes Redis's and Lua's functions from the globals when it
-- runs, and the request script's helpers through `bind`): creating a closure that has upvalues
-- costs every call of the script, envoyproxy counters or not, some 1 500 redis-server
-- instructions (callgrind), while this one is only allocated.

-- The constructor is called with the module's code (5 or 6; see rates.lua): 5 counts every hit
-- asked for, as envoyproxy/ratelimit does by default; 6 is its
-- STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
local function new_envoyproxy_fixed_window(code)
  local redis_call, string_match, string_format, tonumber, math_min, ipairs, error =
    redis.call, string.match, string.format, tonumber, math.min, ipairs, error

  -- Counts saturate here (2^50): far above any limit, so no decision changes, while a sum stays
  -- exact in a double and INCRBY never nears its 2^63 limit, which would fail a commit halfway
  -- through a request's writes. A stored value longer than INCRBY's integers is no count.
  local COUNT_MAX = 1125899906842624
  local COUNT_DIGITS_MAX = 19

  local envoyproxy = {
    counts_denied = true,
    counts_admitted_of_denied_requests = code == 5,
  }

  -- { count, window_end_us, present }. Raises, before anything is written, when the key names
  -- no window or holds anything but a count (envoyproxy/ratelimit's INCRBY would fail too).
  function envoyproxy.load(key, _now, window)
    local start = string_match(key, '_(%d+)$')
    if not start then
      error('ERR ratelimitd: an envoyproxy-format key names no window', 0)
    end
    local raw = redis_call('GET', key)
    local count = 0
    if raw then
      if #raw > COUNT_DIGITS_MAX or not string_match(raw, '^%d+$') then
        error('ERR ratelimitd: an envoyproxy-format key holds something other than a count', 0)
      end
      count = tonumber(raw)
    end
    return { count = count, window_end_us = tonumber(start) * 1000000 + window, present = raw ~= nil }
  end

  -- A denied check's hits are counted too (see decide_request), so nothing remains after it.
  function envoyproxy.evaluate(state, now, limit, _window, _burst, hits, _interval)
    local reset_after = state.window_end_us - now
    if reset_after < 0 then
      reset_after = 0
    end
    local after = state.count + hits
    if after <= limit then
      return true, limit - after, reset_after
    end
    return false, 0, reset_after
  end

  function envoyproxy.commit(key, state, _now, _limit, _window, _burst, hits, ttl_s)
    local room = COUNT_MAX - state.count
    if room > 0 then
      redis_call('INCRBY', key, string_format('%d', math_min(hits, room)))
    end
    redis_call('EXPIRE', key, string_format('%d', ttl_s))
  end

  -- Takes n back from the count (at most what it holds: counts add up, whatever was counted
  -- since); a key that is gone is left alone. The TTL stays.
  function envoyproxy.refund(key, state, _committed_at, _now, _limit, _window, _burst, hits,
      _interval)
    if not state.present or hits == 0 or state.count == 0 or state.count >= COUNT_MAX then
      return false
    end
    redis_call('DECRBY', key, string_format('%d', math_min(hits, state.count)))
    return true
  end

  -- The request script's KEYS and helpers (request.lua), given by `bind` before decide_request.
  local KEYS, read_check, invalid_check, u64_reply, FIELDS

  function envoyproxy.bind(keys, read, invalid, reply, fields)
    KEYS, read_check, invalid_check, u64_reply, FIELDS = keys, read, invalid, reply, fields
  end

  -- request.lua's `decide`, for every request of a call that has envoyproxy/ratelimit counters:
  -- every check is evaluated on the stored state as there, then each key is written once with
  -- the hits it counts:
  --   - ratelimitd's own keys: the admitted checks' hits, when the request is admitted (all or
  --     nothing, as in `decide`);
  --   - envoyproxy/ratelimit's keys: a denied check's hits always (envoyproxy/ratelimit
  --     increments a counter that is over the limit too), and an admitted check's hits when the
  --     request is admitted or, with code 5, always: envoyproxy/ratelimit increments every
  --     descriptor's counter whatever the others decide. With code 6 a denied request thus counts
  --     only where it is over the limit.
  -- So a count means what it means to the envoyproxy/ratelimit instances sharing the key. A later
  -- check of a key is evaluated with the earlier hits that will be written on it whatever
  -- happens, and the earlier admitted ones, added (envoyproxy/ratelimit's pipelined INCRBYs each
  -- see the earlier ones).
  function envoyproxy.decide_request(key_base, arg_base, checks, now, out)
    local states = {}
    local always = {}
    local if_admitted = {}
    local commit_base = {}
    local order = {}
    local vetoed = false
    for i = 1, checks do
      local base = arg_base + (i - 1) * FIELDS
      local algorithm, limit, window, burst, hits, interval, shadow = read_check(base)
      if not algorithm then
        invalid_check(i)
      end
      local key = KEYS[key_base + i]
      if always[key] == nil then
        states[key] = algorithm.load(key, now, window) or false
        always[key] = 0
        if_admitted[key] = 0
        order[#order + 1] = key
      end
      local cumulative = always[key] + if_admitted[key] + hits
      local admitted, remaining, reset_after = algorithm.evaluate(
        states[key] or nil, now, limit, window, burst, math_min(cumulative, burst + 1), interval)
      if admitted then
        if algorithm.counts_admitted_of_denied_requests then
          always[key] = always[key] + hits
        else
          if_admitted[key] = if_admitted[key] + hits
        end
        commit_base[key] = base
      else
        if algorithm.counts_denied then
          always[key] = always[key] + hits
          commit_base[key] = base
        end
        if not shadow then
          vetoed = true
        end
      end
      local at = #out
      out[at + 1] = admitted and 1 or 0
      out[at + 2] = remaining
      out[at + 3] = u64_reply(reset_after)
    end

    for _, key in ipairs(order) do
      local total = always[key]
      if not vetoed then
        total = total + if_admitted[key]
      end
      if total > 0 then
        local algorithm, limit, window, burst, _, interval = read_check(commit_base[key])
        if not algorithm.counts_denied then
          total = math_min(total, burst + 1)
        end
        algorithm.commit(key, states[key] or nil, now, limit, window, burst, total, interval)
      end
    end
  end

  return envoyproxy
end
