local p, first = ARGV[1], ARGV[2]
local v = redis.call('HGET', p .. ':flight', first)
if not v then return 1 end
redis.call('HDEL', p .. ':flight', first)
if string.sub(v, 1, 4) == 'void' then return 0 end
redis.call('INCRBY', p .. ':count', tonumber(ARGV[3]))
return 1
