local p, now, what, pending = ARGV[1], tonumber(ARGV[2]), ARGV[3], {}
for i = 4, #ARGV do
  local v = redis.call('HGET', p .. ':flight', ARGV[i])
  if v and string.sub(v, 1, 4) ~= 'void' then
    local deadline = tonumber(string.match(v, '^%d+ (%d+)'))
    if deadline < now then
      redis.call('HSET', p .. ':flight', ARGV[i], 'void ' .. (now + 3600000))
    elseif what == 'done' or string.sub(v, -2) ~= ' a' then
      pending[#pending + 1] = ARGV[i]
    end
  end
end
return pending
