local tag, before, nums, out = ARGV[1], tonumber(ARGV[2]), ARGV[3], {}
for i = 1, string.len(nums), 4 do
  local name = tag .. ':r:' .. string.sub(nums, i, i + 3)
  local bin = redis.call('GET', name) or ''
  local kept, pos, changed = {}, 1, false
  while pos + 2 <= string.len(bin) do
    local size = struct.unpack('<I2', string.sub(bin, pos + 1, pos + 2))
    local entry = string.sub(bin, pos, pos + 2 + size)
    if size >= 15 and struct.unpack('<I4', string.sub(entry, 13, 16)) < before then
      local id = struct.unpack('<I4', string.sub(nums, i, i + 3)) * 64 + string.byte(entry, 1)
      out[#out + 1] = struct.pack('<I4I4', id, size) .. string.sub(entry, 4)
      changed = true
    else
      kept[#kept + 1] = entry
    end
    pos = pos + 3 + size
  end
  if changed then
    if #kept == 0 then redis.call('DEL', name) else redis.call('SET', name, table.concat(kept)) end
  end
end
return table.concat(out)
