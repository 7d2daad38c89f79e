local tag, dropped = ARGV[1], 0
do
  local arg = ARGV[2]
  local name = tag .. ':b:' .. string.sub(arg, 1, 2)
  local gone = {}
  for j = 3, string.len(arg), 4 do gone[string.sub(arg, j, j + 3)] = true end
  local bin, kept = redis.call('GET', name) or '', {}
  for pos = 1, string.len(bin), 7 do
    if gone[string.sub(bin, pos + 3, pos + 6)] then
      dropped = dropped + 1
    else
      kept[#kept + 1] = string.sub(bin, pos, pos + 6)
    end
  end
  if #kept == 0 then redis.call('DEL', name) elseif dropped > 0 then redis.call('SET', name, table.concat(kept)) end
end
return dropped
