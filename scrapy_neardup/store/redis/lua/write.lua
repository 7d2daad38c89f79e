local tag, writes, drops, releases = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local sub, call, dropped, released = string.sub, redis.call, 0, 0
-- record bin name -> {cut = {slot -> 'w' (written) | 'd' (deleted)}, add = {slot -> entry}, slots = {in order}}
local edits, order = {}, {}
local function edit(id)
  local name = record_bin(tag, id)
  if not edits[name] then edits[name] = {cut = {}, add = {}, slots = {}}; order[#order + 1] = name end
  return edits[name]
end
local pos = 1
while pos <= string.len(writes) do
  local id, size = struct.unpack('<I4I4', sub(writes, pos, pos + 7))
  local e = edit(id)
  if not e.add[id % 64] then e.slots[#e.slots + 1] = id % 64 end
  e.cut[id % 64] = 'w'
  e.add[id % 64] = string.char(id % 64) .. struct.pack('<I2', size) .. sub(writes, pos + 8, pos + 7 + size)
  pos = pos + 8 + size
end
for i = 1, string.len(drops), 4 do
  local id = u32(drops, i)
  edit(id).cut[id % 64] = 'd'
end
-- Each record bin read and written once: its kept entries, then the new ones (exact size: SET, not APPEND).
for _, name in ipairs(order) do
  local e, bin, kept, at = edits[name], call('GET', name) or '', {}, 1
  while at + 2 <= string.len(bin) do
    local size = struct.unpack('<I2', sub(bin, at + 1, at + 2))
    local cut = e.cut[string.byte(bin, at)]
    if cut == 'd' then dropped = dropped + 1 elseif not cut then kept[#kept + 1] = sub(bin, at, at + 2 + size) end
    at = at + 3 + size
  end
  for _, slot in ipairs(e.slots) do
    if e.cut[slot] == 'w' then kept[#kept + 1] = e.add[slot] end
  end
  local value = table.concat(kept)
  if string.len(value) == 0 then call('DEL', name) else call('SET', name, value) end
end
for i = 1, string.len(releases), 14 do
  local name = tag .. ':k:' .. sub(releases, i, i + 1)
  local bin = call('GET', name) or ''
  local at = find_entry(bin, sub(releases, i + 2, i + 9), 12, 1)
  if at and sub(bin, at + 8, at + 11) == sub(releases, i + 10, i + 13) then
    local rest = sub(bin, 1, at - 1) .. sub(bin, at + 12)
    if string.len(rest) == 0 then call('DEL', name) else call('SET', name, rest) end
    released = released + 1
  end
end
return {dropped, released}
