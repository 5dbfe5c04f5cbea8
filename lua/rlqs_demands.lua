-- ratelimitd: the RLQS demands of one bucket, shared by every replica on this Redis.
--
-- Each Envoy stream reporting a bucket keeps its smoothed demand here, so that every replica
-- computes the bucket's shares over the same Envoys and their shares together stay within the
-- rule's one limit (src/store/redis/quota_demands.rs, docs/rlqs.md).
--
-- KEYS[1]: the bucket's hash, [<prefix>]rlqs1:{<sha256 of domain and bucket>}: one field per
--          stream (its id, unique across replicas), value "<expires_ms> <demand>" with demand a
--          decimal number of requests per second, or empty for a newcomer with no rate yet.
-- ARGV[1]: the stream to write, or empty to only read.
-- ARGV[2]: what to write: the demand (a number, or empty for a newcomer), or "-" to remove the
--          stream's field.
-- ARGV[3]: how long the written demand lives, in milliseconds.
-- Returns: a flat array of stream, demand for every live stream (demand empty for a newcomer);
--          expired fields are deleted. The key expires 1 s after its last live field.
-- Time is Redis's (TIME), so replicas with skewed clocks agree on what has expired.

local key = KEYS[1]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local stream = ARGV[1]
if stream ~= '' then
  if ARGV[2] == '-' then
    redis.call('HDEL', key, stream)
  else
    local ttl = tonumber(ARGV[3])
    if not ttl or ttl < 0 then
      return redis.error_reply('rlqs_demands: ARGV[3] must be a number of milliseconds')
    end
    redis.call('HSET', key, stream, (now + ttl) .. ' ' .. ARGV[2])
  end
end
local fields = redis.call('HGETALL', key)
local live = {}
local latest = 0
for i = 1, #fields, 2 do
  local expires, demand = string.match(fields[i + 1], '^(%d+) (.*)$')
  expires = tonumber(expires)
  if expires and expires > now then
    live[#live + 1] = fields[i]
    live[#live + 1] = demand
    if expires > latest then
      latest = expires
    end
  else
    redis.call('HDEL', key, fields[i])
  end
end
if latest > now then
  redis.call('PEXPIRE', key, latest - now + 1000)
end
return live
