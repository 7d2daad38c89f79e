local flight, out = redis.call('HGETALL', ARGV[1] .. ':flight'), {}
for i = 1, #flight, 2 do
  local v = flight[i + 1]
  if string.sub(v, 1, 4) ~= 'void' then
    local first, last = tonumber(flight[i]), tonumber(string.match(v, '^(%d+)'))
    for j = 2, #ARGV do
      local id = tonumber(ARGV[j])
      if id >= first and id <= last then out[#out + 1] = flight[i]; break end
    end
  end
end
return out
