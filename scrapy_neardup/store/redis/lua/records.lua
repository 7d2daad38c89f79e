local tag, now, q = ARGV[1], ARGV[2], ARGV[3]
local cache, out, names = {}, {}, {}
want(names, tag, ':r:', q, 5)
prefetch(cache, names)
for i = 1, string.len(q), 5 do
  local id = struct.unpack('<I4', string.sub(q, i, i + 3))
  local name = record_bin(tag, id)
  local at, size = record_at(cache[name], id % 64)
  if at then
    out[#out + 1] = struct.pack('<I4', size) .. string.sub(cache[name], at + 3, at + 2 + size)
    if string.byte(q, i + 4) == 1 and string.len(now) == 4 and size >= 15 then
      redis.call('SETRANGE', name, at + 2 + 9, now)
    end
  else
    out[#out + 1] = struct.pack('<I4', 0)
  end
end
return table.concat(out)
