local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then
  for i = 1, #ARGV, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
end
return redis.call('HGETALL', key)
