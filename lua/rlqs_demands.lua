-- ratelimitd: the RLQS demands of one bucket, shared by every replica on this Redis.
--
-- Each replica keeps the smoothed demands of all its Envoy streams reporting the bucket in one
-- field, written whole each time it computes the bucket's shares, so that every replica computes
-- the shares over the same Envoys and their shares together stay within the rule's one limit
-- (src/store/redis/quota_demands.rs, docs/rlqs.md). The script's work grows with the number of
-- replicas, not of Envoys: the demands are packed and unpacked by the replicas.
--
-- KEYS[1]: the bucket's hash, [<prefix>]rlqs2:{<sha256 of domain and bucket>}: one field per
--          replica (its random id), value "<expires_ms> <packed demands>".
-- ARGV[1]: the writing replica's field.
-- ARGV[2]: how long the written demands live, in milliseconds.
-- ARGV[3]: the replica's packed demands, "<stream>=<demand>;..." (demand a decimal number of
--          requests per second, or empty for a newcomer), or empty: the replica has no stream
--          of the bucket, and its field is removed.
-- Returns: the packed demands of every live replica's field, this one's included; expired
--          fields are deleted. The key expires 1 s after its last live field.
-- Time is Redis's (TIME), so replicas with skewed clocks agree on what has expired.

local key = KEYS[1]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
if not ttl or ttl < 0 then
  return redis.error_reply('rlqs_demands: ARGV[2] must be a number of milliseconds')
end
if ARGV[3] == '' then
  redis.call('HDEL', key, ARGV[1])
else
  redis.call('HSET', key, ARGV[1], (now + ttl) .. ' ' .. ARGV[3])
end
local fields = redis.call('HGETALL', key)
local live = {}
local latest = 0
for i = 1, #fields, 2 do
  local value = fields[i + 1]
  local space = string.find(value, ' ', 1, true)
  local expires = space and tonumber(string.sub(value, 1, space - 1))
  if expires and expires > now then
    live[#live + 1] = string.sub(value, space + 1)
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
