-- ratelimitd: a batch of rate-limit requests, each decided all or nothing (the entry point of the
-- script).
--
-- The store runs this file with the library files before it (common.lua, the five algorithm
-- files, envoyproxy_fixed_window.lua, rates.lua: see common.lua for the two forms): its chunk
-- returns `decide_call`, the entry point, called with the call's KEYS and ARGV, as a function of
-- the library (FCALL) or at the end of a script (EVALSHA). Concurrent requests share one call
-- (src/store/redis/batch.rs): they are decided one after the other, in order, each on the state
-- the earlier ones left, exactly as if each had its own call.
--
-- KEYS: the counter keys of every check of every request, request after request, in check order
--       (repeats allowed: checks that share a counter share its key),
--       [<prefix>]rl1:{<tag>}:<algorithm>:<window_us>:<identity> (a fixed window's count lives
--       under this key + '@<window index>', see fixed_window.lua), or with --key-format envoyproxy
--       envoyproxy/ratelimit's own key for fixed windows (envoyproxy_fixed_window.lua). In a Redis
--       Cluster call, KEYS is empty and these keys lead ARGV instead, after their count (see
--       keys_and_arguments, common.lua).
-- ARGV: the rates of the call first, each sent once however many checks use it: R (their number,
--       at least 1), then 5 values per rate:
--         code    algorithm: 0 fixed_window, 1 sliding_window_log, 2 sliding_window_counter,
--                 3 token_bucket, 4 gcra; 5 and 6 envoyproxy/ratelimit's fixed-window counter
--                 (every hit counted, or STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)
--         L       limit (requests per window)
--         W       window in µs
--         B       burst (capacity; equals L for the window algorithms)
--         T       GCRA emission interval in µs (ignored by the other algorithms); for codes 5 and
--                 6, the TTL in seconds of the keys this call writes
--       then ONE value per check, in the same order as KEYS: the check's spec, a text the script
--       decodes once per distinct text in the call (the checks of a call mostly share a few, and
--       Redis turns every argument into a Lua string: fewer arguments, less work per check):
--         a request's first check   <rate>                  (the request's only check, n 1, not
--                                                            shadow, on Redis's clock), or
--                                   <rate>:<n>:<shadow>:<k>[:<now>]
--         each further check        +<rate>                 (n 1, not shadow), or
--                                   +<rate>:<n>:<shadow>
--       where
--         rate    the check's rate: its position (1-based) in the rates above
--         n       hits, clamped by Rust to at most 2^32 (more than any B + 1)
--         shadow  1 for a shadow-mode check (decided and counted, never vetoes), else 0
--         k       the request's number of checks (at least 1): its first and k - 1 further ones
--         now     µs, pinning the request's time (tests); absent, Redis's own clock (TIME, read
--                 once per call): production never pins, so hosts with skewed clocks agree.
--       or, for a lease (a request of one check that reserves hits, see lease.lua),
--         its only check            L<rate>:<want>:<min>:<period>[:<now>]
--       where want is the hits wanted, min the fewest worth granting and period the µs a
--       token_bucket or gcra lease lasts.
-- Returns: ONE flat array for the whole call: first the call's clock, the µs of the TIME it read
--          (0 when every request pinned its time), which a refund of its writes names; then,
--          request after request: for each, either its k
--          verdicts as 3 values each, {admitted 0/1, remaining, reset_after_us}, in check order
--          (a lease's verdict is {granted > 0, hits granted, µs until the lease ends or, when
--          none was granted, until min could be}; integers; a reset_after_us of 2^63 or more, which only Rust's saturation produces,
--          travels as a decimal string), or, for that request alone, ONE element: an error
--          message as a plain string ('<CODE> <text>': invalid arguments, or a Redis error while
--          deciding it; not an error reply, which clients raise for the whole call). A request's
--          first element is thus an integer (0/1) or its error. Flat because Redis turns every
--          returned table into a reply of its own (a table per verdict cost ~1 µs each).
--          An ARGV/KEYS layout that does not add up, an invalid rate, or a spec that is none
--          (an unknown rate position, a pinned time of 2^53 or more) fails the whole call before
--          anything is decided.
--
-- A request of one check whose algorithm has a decide_one (fixed_window.lua, gcra.lua) is
-- decided by it alone: no `pcall`, closure or table per request; it calls Redis with
-- redis.pcall, so a Redis error (WRONGTYPE, a key the cluster node does not own...) answers that
-- request only, as the `pcall` of the general path does for the others.
--
-- Within a request, every check is evaluated first, on the stored state, with the hits of the
-- earlier ADMITTED checks on the same key added (a denied check consumes nothing, so a denied
-- shadow check cannot make a later check of its counter fail). Nothing is written unless every
-- non-shadow check admits; then each distinct key is committed once, with the total hits of its
-- admitted checks and the rate of its last admitted check; a key whose total is 0 is not written.
-- envoyproxy/ratelimit's counters (codes 5 and 6) also count hits of denied requests: see
-- decide_request in envoyproxy_fixed_window.lua.

-- The first byte of a lease's spec ('L').
local LEASE_MARK = 76

-- The call's keys and arguments, read several times per check, as locals (see common.lua for the
-- cluster form, whose keys travel in ARGV). Set by `decide_call` at the start of each call, as are
-- `rates`, `envoyproxy` and `specs` below: every function of this file is defined once per load of
-- the function library, and reads the call's state through them.
local KEYS, ARGV

-- ARGV values per check: its spec.
local FIELDS = 1

-- The rates of this call (see ARGV above): { algorithm, L, W, B, T } each, by position.
local rates

-- The envoyproxy/ratelimit counter module (codes 5, 6) of the call's rate table, if it has one:
-- the call's requests are then decided by its decide_request (envoyproxy_fixed_window.lua).
local envoyproxy = nil

-- The decoded specs of this call by their text: { rate, n, shadow, k (0 for a further check),
-- pinned now or false }, a lease's { rate, want, false, 1, pinned now or false, min, period },
-- or false for a text that is no spec.
local specs

-- Decodes the spec `text` (see ARGV above) into `specs`, and returns what it stored there.
local function decode_spec(text)
  local spec = false
  if string_byte(text, 1) == LEASE_MARK then
    local position, want, min, period, pinned = string_match(text, '^L(%d+):(%d+):(%d+):(%d+)(.*)$')
    local rate = position and rates[tonumber(position)]
    local now = false
    if pinned and pinned ~= '' then
      local digits = string_match(pinned, '^:(%d+)$')
      now = digits and tonumber(digits)
      if now and now >= TWO_POW_53 then
        now = nil
      end
    end
    if rate and now ~= nil then
      spec = { rate, tonumber(want), false, 1, now, tonumber(min), tonumber(period) }
    end
    specs[text] = spec
    return spec
  end
  local further, position, rest = string_match(text, '^(%+?)(%d+)(.*)$')
  local rate = position and rates[tonumber(position)]
  if rate then
    local first = further == ''
    if rest == '' then
      spec = { rate, 1, false, first and 1 or 0, false }
    else
      local hits, shadow, tail = string_match(rest, '^:(%d+):([01])(.*)$')
      hits = hits and tonumber(hits)
      if hits and not first and tail == '' then
        spec = { rate, hits, shadow == '1', 0, false }
      elseif hits and first then
        local checks, pinned = string_match(tail, '^:(%d+)(.*)$')
        checks = checks and tonumber(checks)
        local now = false
        if pinned ~= '' then
          local digits = string_match(pinned or '', '^:(%d+)$')
          now = digits and tonumber(digits)
          if now and now >= TWO_POW_53 then
            now = nil
          end
        end
        if checks and checks >= 1 and now ~= nil then
          spec = { rate, hits, shadow == '1', checks, now }
        end
      end
    end
  end
  specs[text] = spec
  return spec
end

-- The rate (table) and hits of the check whose spec is ARGV[base + 1] (decoded by the framing
-- below).
local function read_rate_and_hits(base)
  local spec = specs[ARGV[base + 1]]
  return spec[1], spec[2]
end

-- The values of the check whose spec is ARGV[base + 1]: algorithm, L, W, B, n, T, shadow.
local function read_check(base)
  local spec = specs[ARGV[base + 1]]
  local rate = spec[1]
  return rate[1], rate[2], rate[3], rate[4], spec[2], rate[5], spec[3]
end

local function invalid_check(i)
  error('ERR ratelimitd: invalid arguments for check ' .. i, 0)
end

-- The one-check request of an algorithm without a decide_one of its own: the general rule
-- below reduces to "write when admitted". Returns its verdict's three values.
local function decide_one(key, base, now)
  local rate, hits = read_rate_and_hits(base)
  local algorithm, limit, window, burst, interval = rate[1], rate[2], rate[3], rate[4], rate[5]
  if hits > burst then
    hits = burst + 1
  end
  local state = algorithm.load(key, now, window)
  local admitted, remaining, reset_after = algorithm.evaluate(
    state, now, limit, window, burst, hits, interval)
  if reset_after >= TWO_POW_63 then -- u64_reply, called only where it changes something
    reset_after = u64_reply(reset_after)
  end
  if admitted then
    if hits > 0 then
      algorithm.commit(key, state, now, limit, window, burst, hits, interval)
    end
    return 1, remaining, reset_after
  end
  return 0, remaining, reset_after
end

-- Requests of more checks than this skip the pairwise comparison below (k^2 / 2 of them) and
-- take the general path.
local DISTINCT_MAX = 16

-- Whether the k keys from KEYS[key_base + 1] are all different (Lua strings are interned: each
-- comparison is a pointer comparison); false for more than DISTINCT_MAX keys.
local function distinct_keys(key_base, checks)
  if checks > DISTINCT_MAX then
    return false
  end
  for i = key_base + 2, key_base + checks do
    local key = KEYS[i]
    for j = key_base + 1, i - 1 do
      if KEYS[j] == key then
        return false
      end
    end
  end
  return true
end

-- `decide` for a request whose checks all have their own key, the common case: no hits to add
-- up per key, so no table per key either (their bookkeeping cost ~2 µs per check). What the
-- commit needs waits in `pending`, 3 values per check (state, rate, hits), one table for the
-- whole call (a new one per request cost ~1 500 redis-server instructions per check in its
-- growth); a check's verdict, already in `out`, says whether it was admitted.
local pending = {}
local function decide_distinct(key_base, arg_base, checks, now, out)
  local first = #out
  local vetoed = false
  for i = 1, checks do
    local spec = specs[ARGV[arg_base + i]]
    local rate, hits = spec[1], spec[2]
    local algorithm, limit, window, burst, interval = rate[1], rate[2], rate[3], rate[4], rate[5]
    if hits > burst then
      hits = burst + 1
    end
    local state = algorithm.load(KEYS[key_base + i], now, window)
    local admitted, remaining, reset_after = algorithm.evaluate(
      state, now, limit, window, burst, hits, interval)
    local slot = (i - 1) * 3
    local at = first + slot
    if admitted then
      out[at + 1] = 1
    else
      out[at + 1] = 0
      if not spec[3] then
        vetoed = true
      end
    end
    out[at + 2] = remaining
    if reset_after >= TWO_POW_63 then -- u64_reply, called only where it changes something
      reset_after = u64_reply(reset_after)
    end
    out[at + 3] = reset_after
    pending[slot + 1] = state or false
    pending[slot + 2] = rate
    pending[slot + 3] = hits
  end
  if vetoed then
    return
  end
  for i = 1, checks do
    local slot = (i - 1) * 3
    local hits = pending[slot + 3]
    if hits > 0 and out[first + slot + 1] == 1 then
      local rate = pending[slot + 2]
      rate[1].commit(KEYS[key_base + i], pending[slot + 1] or nil, now, rate[2], rate[3], rate[4],
        hits, rate[5])
    end
  end
end

-- Decides the request whose keys are KEYS[key_base + 1 ..] and whose specs are
-- ARGV[arg_base + 1 ..], appending its verdicts' values to `out`; raises an error before writing
-- anything when Redis fails a load (the caller then drops what it appended).
local function decide(key_base, arg_base, checks, now, out)
  if distinct_keys(key_base, checks) then
    return decide_distinct(key_base, arg_base, checks, now, out)
  end
  -- Evaluate every check on the stored state (each key loaded once), with the hits of the earlier
  -- admitted checks on the same key added.
  local states = {}
  local admitted_hits = {}
  local commit_base = {}
  local order = {}
  local vetoed = false
  for i = 1, checks do
    local base = arg_base + (i - 1) * FIELDS
    local algorithm, limit, window, burst, hits, interval, shadow = read_check(base)
    local key = KEYS[key_base + i]
    local earlier = admitted_hits[key]
    if earlier == nil then
      earlier = 0
      states[key] = algorithm.load(key, now, window) or false
      order[#order + 1] = key
    end
    local cumulative = earlier + hits
    -- Rust's algorithm::evaluate clamps hits to B + 1 (nothing above it can be admitted).
    local admitted, remaining, reset_after = algorithm.evaluate(
      states[key] or nil, now, limit, window, burst, math_min(cumulative, burst + 1), interval)
    if admitted then
      admitted_hits[key] = cumulative
      commit_base[key] = base
    else
      admitted_hits[key] = earlier
      if not shadow then
        vetoed = true
      end
    end
    local at = #out
    out[at + 1] = admitted and 1 or 0
    out[at + 2] = remaining
    out[at + 3] = u64_reply(reset_after)
  end

  -- All or nothing: commit each distinct key once, with the total hits of its admitted checks and
  -- the rate of the last of them.
  if not vetoed then
    for _, key in ipairs(order) do
      local total = admitted_hits[key]
      if total > 0 then
        local algorithm, limit, window, burst, _, interval = read_check(commit_base[key])
        algorithm.commit(key, states[key] or nil, now, limit, window, burst,
          math_min(total, burst + 1), interval)
      end
    end
  end
end

-- The message of an error raised while deciding (a table with `err` for Redis errors since
-- Redis 7, a string otherwise).
local function error_message(raised)
  if type(raised) == 'table' and raised.err then
    return raised.err
  end
  return tostring(raised)
end

-- The entry point: decides every request of the call whose keys are `declared` (KEYS) and whose
-- arguments are `given` (ARGV), and returns the flat reply described above.
local function decide_call(declared, given)
  start_call()
  KEYS, ARGV = keys_and_arguments(declared, given)
  rates, envoyproxy, specs = {}, nil, {}

  -- Read the rates and frame the call first: a layout that does not add up decides nothing.
  local rate_count = tonumber(ARGV[1])
  if not rate_count or rate_count < 1 or 1 + rate_count * RATE_FIELDS > #ARGV then
    return redis.error_reply('ERR ratelimitd: malformed rate table (' .. #ARGV .. ' arguments)')
  end
  for r = 1, rate_count do
    rates[r] = read_rate(ARGV, r)
    if not rates[r] then
      return redis.error_reply('ERR ratelimitd: invalid rate ' .. r)
    end
    if rates[r][1].decide_request then
      envoyproxy = rates[r][1]
      envoyproxy.bind(KEYS, read_check, invalid_check, u64_reply, FIELDS)
    end
  end

  -- One spec per key; every request a first check and its k - 1 further ones.
  local first_spec = 2 + rate_count * RATE_FIELDS
  local last_spec = #ARGV
  if last_spec - first_spec + 1 ~= #KEYS or #KEYS == 0 then
    return redis.error_reply('ERR ratelimitd: ' .. #KEYS .. ' keys for '
      .. (last_spec - first_spec + 1) .. ' checks')
  end
  local requests = 0
  local i = first_spec
  while i <= last_spec do
    requests = requests + 1
    local text = ARGV[i]
    local spec = specs[text]
    if spec == nil then
      spec = decode_spec(text)
    end
    local checks = spec and spec[4] or 0
    local last = i + checks - 1
    local well_formed = checks > 0 and last <= last_spec
    if well_formed then
      for j = i + 1, last do
        local further = specs[ARGV[j]]
        if further == nil then
          further = decode_spec(ARGV[j])
        end
        if not further or further[4] ~= 0 then
          well_formed = false
          break
        end
      end
    end
    if not well_formed then
      return redis.error_reply('ERR ratelimitd: malformed request ' .. requests .. ' ('
        .. #KEYS .. ' keys, ' .. #ARGV .. ' arguments)')
    end
    i = last + 1
  end

  -- Decide, request after request. A check's key is KEYS[its spec's index - key_offset].
  local key_offset = first_spec - 1
  local redis_now
  local out = { 0 }
  local out_len = 1
  i = first_spec
  while i <= last_spec do
    local spec = specs[ARGV[i]]
    local checks = spec[4]
    local now = spec[5]
    if not now then
      if not redis_now then
        local time = redis_call('TIME')
        redis_now = tonumber(time[1]) * 1000000 + tonumber(time[2])
        out[1] = redis_now
      end
      now = redis_now
    end
    local at = out_len
    if spec[6] then
      local ok, first, granted, after = pcall(grant_lease, KEYS[i - key_offset], now, spec[1],
        spec[2], spec[6], spec[7])
      if ok then
        out[at + 1] = first
        out[at + 2] = granted
        out[at + 3] = after
        out_len = at + 3
      else
        out[at + 1] = error_message(first)
        out_len = at + 1
      end
    elseif checks == 1 and not envoyproxy then
      local rate = spec[1]
      local algorithm = rate[1]
      local lean = algorithm.decide_one
      if lean then
        local first, remaining, reset_after = lean(KEYS[i - key_offset], now, rate, spec[2])
        out[at + 1] = first
        if remaining then
          out[at + 2] = remaining
          out[at + 3] = reset_after
          out_len = at + 3
        else
          out_len = at + 1
        end
      else
        local ok, first, remaining, reset_after =
          pcall(decide_one, KEYS[i - key_offset], i - 1, now)
        if ok then
          out[at + 1] = first
          out[at + 2] = remaining
          out[at + 3] = reset_after
          out_len = at + 3
        else
          out[at + 1] = error_message(first)
          out_len = at + 1
        end
      end
    else
      local ok, raised = pcall(envoyproxy and envoyproxy.decide_request or decide,
        i - 1 - key_offset, i - 1, checks, now, out)
      if not ok then
        for j = #out, at + 1, -1 do
          out[j] = nil
        end
        out[at + 1] = error_message(raised)
      end
      out_len = #out
    end
    i = i + checks
  end
  return out
end

return decide_call
