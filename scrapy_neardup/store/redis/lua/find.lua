local function find_entry(s, needle, width, from)
  local pos = from
  while true do
    local at = string.find(s, needle, pos, true)
    if not at then return nil end
    if (at - 1) % width == 0 then return at end
    pos = at + 1
  end
end
local function record_bin(tag, id) return tag .. ':r:' .. struct.pack('<I4', math.floor(id / 64)) end
local function u32(s, i)  -- the little-endian u32 at position i
  local a, b, c, d = string.byte(s, i, i + 3)
  return a + b * 256 + c * 65536 + d * 16777216
end
-- Add to `names` the bins named by a blob's entries of `width` bytes: a u16 bin number (of `kind`, ':b:'
-- or ':k:') or, for kind ':r:', a u32 document id, at the start of each entry. Returns the names in order.
local function want(names, tag, kind, blob, width)
  local list, sub = {}, string.sub
  for i = 1, string.len(blob), width do
    local name
    if kind == ':r:' then name = record_bin(tag, u32(blob, i)) else name = tag .. kind .. sub(blob, i, i + 1) end
    names[name] = true
    list[#list + 1] = name
  end
  return list
end
-- The values of `names` (a set: name -> true) into `cache`, in as few MGETs as Lua's stack allows.
local function prefetch(cache, names)
  local batch = {}
  local function fetch()
    local values = redis.call('MGET', unpack(batch))
    for i = 1, #batch do cache[batch[i]] = values[i] or '' end
    batch = {}
  end
  for name in pairs(names) do
    if cache[name] == nil then
      batch[#batch + 1] = name
      if #batch == 4000 then fetch() end
    end
  end
  if #batch > 0 then fetch() end
end
local function record_at(bin, slot)  -- 1-based position of the entry of `slot` in a record bin, or nil
  local pos, len = 1, string.len(bin)
  while pos + 2 <= len do
    local size = struct.unpack('<I2', string.sub(bin, pos + 1, pos + 2))
    if string.byte(bin, pos) == slot then return pos, size end
    pos = pos + 3 + size
  end
  return nil
end
