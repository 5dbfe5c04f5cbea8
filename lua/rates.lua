-- ratelimitd: the call's rate table, read alike by both entry points (library file, after the
-- five algorithm files and envoyproxy_fixed_window.lua, whose constructors it names; before
-- request.lua or refund.lua).
--
-- ARGV layout of the table (see request.lua's header): R, then 5 values per rate: code, L, W, B, T.

-- The algorithm modules by code, built on first use (see the algorithm files); a constructor is
-- called with its code. Codes 5 and 6 are envoyproxy/ratelimit's counters. A script builds them
-- again on every call; a function library keeps them from call to call (`start_call` empties
-- what they cache within a call).
local CONSTRUCTORS = {
  [0] = new_fixed_window,
  [1] = new_sliding_window_log,
  [2] = new_sliding_window_counter,
  [3] = new_token_bucket,
  [4] = new_gcra,
  [5] = new_envoyproxy_fixed_window,
  [6] = new_envoyproxy_fixed_window,
}
local modules = {}

-- The module of algorithm `code`, or nil for an unknown code.
local function algorithm_of(code)
  local module = modules[code]
  if module == nil then
    local construct = CONSTRUCTORS[code]
    if not construct then
      return nil
    end
    module = construct(code)
    modules[code] = module
  end
  return module
end

-- Every entry point calls this first, each call: Lua's and Redis's functions bound (see
-- common.lua), and every cache that one call fills emptied, so that none outlives its call in a
-- function library (their keys come from the call's arguments: kept, they would grow without
-- bound).
local function start_call()
  if not redis_call then
    bind_globals()
  end
  px_texts = {}
  for _, module in pairs(modules) do
    local start = module.start_call
    if start then
      start()
    end
  end
end

local RATE_FIELDS = 5

-- Rate r (1-based) of the table at the head of `arguments`: { algorithm module, L, W, B, T }, or
-- nil when one of its values is missing or out of range.
local function read_rate(arguments, r)
  local base = 1 + (r - 1) * RATE_FIELDS
  local code = tonumber(arguments[base + 1])
  local algorithm = code and algorithm_of(code)
  local limit = tonumber(arguments[base + 2])
  local window = tonumber(arguments[base + 3])
  local burst = tonumber(arguments[base + 4])
  local interval = tonumber(arguments[base + 5])
  if not algorithm or not limit or limit < 1 or not window or window < 1 or not burst
      or burst < 1 or not interval or interval < 1 then
    return nil
  end
  return { algorithm, limit, window, burst, interval }
end
