local tag, kq, bq = ARGV[1], ARGV[2], ARGV[3]
local cache, ids, found, hits, names = {}, {}, {}, {}, {}
local knames, bnames = want(names, tag, ':k:', kq, 10), want(names, tag, ':b:', bq, 5)
prefetch(cache, names)
for q = 1, string.len(kq), 10 do
  local name = knames[(q + 9) / 10]
  local at = find_entry(cache[name], string.sub(kq, q + 2, q + 9), 12, 1)
  ids[#ids + 1] = at and string.sub(cache[name], at + 8, at + 11) or struct.pack('<I4', 0)
end
for q = 1, string.len(bq), 5 do
  local bin, rest, n = cache[bnames[(q + 4) / 5]], string.sub(bq, q + 2, q + 4), 0
  local at = find_entry(bin, rest, 7, 1)
  while at do
    hits[#hits + 1] = string.sub(bin, at + 3, at + 6)
    n = n + 1
    at = find_entry(bin, rest, 7, at + 7)
  end
  found[#found + 1] = struct.pack('<I4I2', string.len(bin), n)
end
return {table.concat(ids), table.concat(found), table.concat(hits)}
