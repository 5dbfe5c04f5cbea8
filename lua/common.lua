-- ratelimitd: helpers shared by every algorithm (library file, no KEYS or ARGV of its own).
--
-- The Rust store concatenates common.lua, the five algorithm files and request.lua into ONE
-- script (Redis cannot call one script from another), loads it once and calls it with EVALSHA.
-- Only request.lua reads KEYS and ARGV; see its header for the calling convention.
--
-- Numbers: Lua 5.1 numbers are IEEE doubles. Every instant and duration is an integer of µs below
-- 2^53 (Rate bounds windows to 100 years), so integer arithmetic here is exact; the f64 expressions
-- of token_bucket and sliding_window_counter are written with the same operations in the same
-- order as the Rust code, so both produce bit-identical doubles.

-- The math functions every check uses, as locals: a global lookup per use cost ~2 500
-- redis-server instructions per check (callgrind).
local math_ceil, math_floor, math_fmod, math_max, math_min =
  math.ceil, math.floor, math.fmod, math.max, math.min

local U32_MAX = 4294967295

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
  return string.format('%.0f', x)
end

-- Exact decimal text of an integer-valued number (never exponent notation).
local function int_str(x)
  if x >= TWO_POW_63 then
    return string.format('%.0f', x)
  end
  return string.format('%d', x)
end

-- Longest TTL written (2^53 ms, some 285 000 years): a slow refill of a huge token bucket can
-- need more, and an out-of-range PX would fail the script halfway through its writes.
local TTL_MAX_MS = TWO_POW_53

-- PEXPIRE milliseconds for a state that is worthless from `expires_at_us` on:
-- the state's remaining life rounded up to whole ms, plus one second.
local function ttl_ms(expires_at_us, now_us)
  local left = expires_at_us - now_us
  if left < 0 then
    left = 0
  end
  return math_min(math_ceil(left / 1000) + 1000, TTL_MAX_MS)
end

-- The PX argument for a state that is worthless from `expires_at_us` on: `ttl_ms` as text. Checks
-- of one call mostly share their TTL, and formatting a number costs more than the table lookup
-- that finds it already formatted in this call.
local ttl_texts = {}
local function ttl_text(expires_at_us, now_us)
  local ms = ttl_ms(expires_at_us, now_us)
  local text = ttl_texts[ms]
  if not text then
    text = int_str(ms)
    ttl_texts[ms] = text
  end
  return text
end

-- Start of the epoch-aligned window of length `window_us` containing `now_us`
-- (math.fmod is exact for doubles, unlike Lua 5.1's `%`).
local function window_start_us(window_us, now_us)
  return now_us - math_fmod(now_us, window_us)
end
