local p, n, now, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local last = redis.call('INCRBY', p .. ':seq', n)
local first = last - n + 1
local flight = redis.call('HGETALL', p .. ':flight')
local lower = {}
for i = 1, #flight, 2 do
  local v = flight[i + 1]
  if string.sub(v, 1, 4) == 'void' then
    if tonumber(string.sub(v, 6)) < now then redis.call('HDEL', p .. ':flight', flight[i]) end
  elseif tonumber(flight[i]) < first and string.sub(v, -2) ~= ' a' then
    lower[#lower + 1] = flight[i]
  end
end
redis.call('HSET', p .. ':flight', first, last .. ' ' .. (now + lease))
return {first, lower}
