-- KEYS[1]: P:running. ARGV: process, now (ms), stale (ms). Reply: when the crawl it joined began (ms).
-- Fields: 'started', and 'p:' .. name for each process crawling on the store, its last beat (ms). A process
-- whose last beat is older than `stale` is gone (it died without leaving) and is dropped; with no process
-- left, a new crawl begins now.
local now, stale = tonumber(ARGV[2]), tonumber(ARGV[3])
local fields = redis.call('HGETALL', KEYS[1])
local live = 0
for i = 1, #fields, 2 do
  local name = fields[i]
  if string.sub(name, 1, 2) == 'p:' then
    if (tonumber(fields[i + 1]) or 0) < now - stale then
      redis.call('HDEL', KEYS[1], name)
    else
      live = live + 1
    end
  end
end
local started = redis.call('HGET', KEYS[1], 'started')
if live == 0 or not tonumber(started) then
  started = ARGV[2]
  redis.call('HSET', KEYS[1], 'started', started)
end
redis.call('HSET', KEYS[1], 'p:' .. ARGV[1], ARGV[2])
return started
