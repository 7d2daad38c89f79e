local v = redis.call('HGET', ARGV[1] .. ':flight', ARGV[2])
if v and string.sub(v, 1, 4) ~= 'void' and string.sub(v, -2) ~= ' a' then
  redis.call('HSET', ARGV[1] .. ':flight', ARGV[2], v .. ' a')
end
return 0
