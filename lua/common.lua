-- ratelimitd: helpers shared by every algorithm (library file, no KEYS or ARGV of its own).
--
-- The Rust store assembles common.lua, the five algorithm files, envoyproxy_fixed_window.lua and
-- rates.lua (the library files) with the entry points (request.lua, refund.lua: each a chunk that
-- returns its entry function, called with the call's keys and arguments) in one of two forms
-- (src/store/redis/scripts/library.rs):
-- - a Redis Functions library (FUNCTION LOAD, Redis 7.0+ and Valkey): the library files and every
--   entry point in one chunk, each entry registered as a function and called with FCALL. The
--   chunk runs once, at load, with none of Lua's or Redis's globals but `redis.register_function`;
--   each FCALL runs only the entry function.
-- - one script per entry point (SCRIPT LOAD, EVALSHA; Redis 6.x, or a user that may not load
--   functions): the library files, then the entry chunk, whose function is called with KEYS and
--   ARGV. Redis runs the whole chunk on every call.
-- So the top level of these files only defines: locals, functions, constants and tables, never a
-- global lookup. What lives across calls of a function (the modules of rates.lua) keeps nothing
-- of a call: `start_call` (rates.lua) empties the caches each call fills. See the entry points'
-- headers for the calling conventions.
--
-- Numbers: Lua 5.1 numbers are IEEE doubles. Every instant and duration is an integer of µs below
-- 2^53 (Rate bounds windows to 100 years), so integer arithmetic here is exact; the f64 expressions
-- of token_bucket and sliding_window_counter are written with the same operations in the same
-- order as the Rust code, so both produce bit-identical doubles.

-- The globals every check uses, as locals: a global lookup per use cost ~2 500 redis-server
-- instructions per check for the math functions alone (callgrind). Bound by `bind_globals` at the
-- first call (a library is loaded without globals).
local math_ceil, math_floor, math_fmod, math_max, math_min
local redis_call, redis_pcall, string_byte, string_format, string_match, tonumber, type

local function bind_globals()
  math_ceil, math_floor, math_fmod, math_max, math_min =
    math.ceil, math.floor, math.fmod, math.max, math.min
  -- `tonumber` and `type` name the locals here: the globals are read through `_G`.
  redis_call, redis_pcall, string_byte, string_format, string_match, tonumber, type = redis.call,
    redis.pcall, string.byte, string.format, string.match, _G.tonumber, _G.type
end

local U32_MAX = 4294967295

-- The call's keys and arguments, from the `declared` keys and the `given` arguments it was called
-- with. A single server gets the keys declared (KEYS). A Redis Cluster
-- call carries the keys of several slots that one node owns: Redis answers CROSSSLOT when such
-- keys are declared, but lets a script without flags (no shebang), or a function flagged
-- allow-cross-slot-keys, access them, and fails each
-- access to a key the node does not own ('Script attempted to access a non local key'), which the
-- request scripts meet while loading, before they write. So there KEYS is empty and ARGV starts
-- with the key count, then the keys; the rest is the ARGV of the declared form.
local function keys_and_arguments(declared, given)
  if #declared > 0 then
    return declared, given
  end
  local count = tonumber(given[1])
  if not count or count < 0 or count ~= math_floor(count) or count + 1 > #given then
    return declared, given
  end
  local keys, arguments = {}, {}
  for i = 1, count do
    keys[i] = given[i + 1]
  end
  for i = count + 2, #given do
    arguments[i - count - 1] = given[i]
  end
  return keys, arguments
end

-- Rust `x as u32` for a float (saturating; NaN impossible here).
local function as_u32(x)
  if x < 0 then
    return 0
  end
  if x > U32_MAX then
    return U32_MAX
  end
  return x
end

-- Rust `x as u64` for a float: saturating at 0 (the upper saturation is applied by `u64_reply`).
local function as_u64(x)
  if x < 0 then
    return 0
  end
  return x
end

-- Integers up to here are exact doubles.
local TWO_POW_53 = 9007199254740992
local TWO_POW_63 = 9223372036854775808
local TWO_POW_64 = 18446744073709551616

-- A non-negative integer-valued number as a reply element that Rust reads as the same u64 (and as
-- u64::MAX where Rust's `as u64` saturates). Redis converts a returned Lua number with a C cast to
-- a signed 64-bit integer, exact below 2^63 and undefined beyond, so larger values travel as
-- decimal strings.
local function u64_reply(x)
  if x < TWO_POW_63 then
    return x
  end
  if x >= TWO_POW_64 then
    return '18446744073709551615'
  end
  return string_format('%.0f', x)
end

-- Exact decimal text of an integer-valued number (never exponent notation).
local function int_str(x)
  if x >= TWO_POW_63 then
    return string_format('%.0f', x)
  end
  return string_format('%d', x)
end

-- Longest TTL written (2^53 ms, some 285 000 years): a slow refill of a huge token bucket can
-- need more, and an out-of-range PX would fail the script halfway through its writes.
local TTL_MAX_MS = TWO_POW_53

-- Expiry in steps of half a second: a key written with a state that is worthless from instant x
-- on vanishes at the end of the step after x's, 0.5 to 1 s after x (never later than needed
-- + 1 s). Keys whose states become worthless within the same step thus share one expiry instant,
-- and a write that leaves its key's step as it was keeps the key's expiry (`SET ... KEEPTTL`):
-- setting an expiry is most of a SET's cost in redis-server (removeExpire, setExpire and the
-- rewrite to PXAT for propagation; in a Lua loop over 100 000 keys, SET with PX took ~2.3 µs and
-- SET with KEEPTTL ~1.1 µs). Keys written by earlier versions, at x + 1 s, expire no earlier.
local EXPIRY_STEP_US = 500000

-- The PX argument (ms, as text) for a state that is worthless within expiry step `step`
-- (math_floor(instant / EXPIRY_STEP_US)): the end of the next step, rounded up to whole ms. Checks
-- of one call mostly share it, and formatting a number costs more than the table lookup that finds
-- it already formatted in this call.
local px_texts = {}
local function px_text(step, now_us)
  local vanish_at = (step + 2) * EXPIRY_STEP_US
  local ms = math_min(math_ceil((vanish_at - now_us) / 1000), TTL_MAX_MS)
  local text = px_texts[ms]
  if not text then
    text = int_str(ms)
    px_texts[ms] = text
  end
  return text
end

-- Writes `value`, a state worthless from `expires_at_us` on, to `key`, which holds a state
-- worthless from `stored_expires_at_us` on (nil: none was read). Only an instant that follows
-- from the key and the stored state alone may be passed as stored: one that also depends on the
-- rate, which a reload may change, may not be the instant the key's expiry was set for.
local function write_state(key, value, expires_at_us, stored_expires_at_us, now_us)
  local step = math_floor(expires_at_us / EXPIRY_STEP_US)
  if stored_expires_at_us and math_floor(stored_expires_at_us / EXPIRY_STEP_US) == step then
    redis_call('SET', key, value, 'KEEPTTL')
  else
    redis_call('SET', key, value, 'PX', px_text(step, now_us))
  end
end

-- write_state for the one-check path of gcra.lua (decide_one), which calls Redis with
-- redis.pcall so that a Redis error answers the request it belongs to without a Lua `pcall` per
-- request: the error message, or nil once written.
local function try_write_state(key, value, expires_at_us, stored_expires_at_us, now_us)
  local step = math_floor(expires_at_us / EXPIRY_STEP_US)
  local reply
  if stored_expires_at_us and math_floor(stored_expires_at_us / EXPIRY_STEP_US) == step then
    reply = redis_pcall('SET', key, value, 'KEEPTTL')
  else
    reply = redis_pcall('SET', key, value, 'PX', px_text(step, now_us))
  end
  return reply.err
end

-- The message of a Redis error that redis.pcall returned (a table with `err`), for a reply value
-- that is a table; nil for any other value.
local function pcall_error(reply)
  if type(reply) == 'table' then
    return reply.err or 'ERR ratelimitd: unexpected reply'
  end
  return nil
end

-- Start of the epoch-aligned window of length `window_us` containing `now_us`
-- (math.fmod is exact for doubles, unlike Lua 5.1's `%`).
local function window_start_us(window_us, now_us)
  return now_us - math_fmod(now_us, window_us)
end
