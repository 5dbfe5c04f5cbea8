-- ratelimitd: the RLQS demands of one bucket, shared by every replica on this Redis.
--
-- Each Envoy stream reporting a bucket keeps its smoothed demand here, so that every replica
-- computes the bucket's shares over the same Envoys and their shares together stay within the
-- rule's one limit (src/store/redis/quota_demands.rs, docs/rlqs.md). A replica writes the
-- demands of all its streams of the bucket in one call, each time it computes the shares.
--
-- KEYS[1]:   the bucket's hash, [<prefix>]rlqs1:{<sha256 of domain and bucket>}: one field per
--            stream (its id, unique across replicas), value "<expires_ms> <demand>" with demand a
--            decimal number of requests per second, or empty for a newcomer with no rate yet.
-- ARGV[1]:   how long the written demands live, in milliseconds.
-- ARGV[2k], ARGV[2k+1] (k >= 1): a stream and what to write for it: its demand (a number, or
--            empty for a newcomer), or "-" to remove the stream's field. None: only read.
-- Returns:   a flat array of stream, demand for every live stream (demand empty for a newcomer);
--            expired fields are deleted. The key expires 1 s after its last live field.
-- Time is Redis's (TIME), so replicas with skewed clocks agree on what has expired.

local key = KEYS[1]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[1])
if not ttl or ttl < 0 then
  return redis.error_reply('rlqs_demands: ARGV[1] must be a number of milliseconds')
end
if #ARGV % 2 == 0 then
  return redis.error_reply('rlqs_demands: ARGV[2..] must be stream, demand pairs')
end
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '-' then
    redis.call('HDEL', key, ARGV[i])
  else
    redis.call('HSET', key, ARGV[i], (now + ttl) .. ' ' .. ARGV[i + 1])
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
