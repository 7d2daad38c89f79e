local tag, reads, out, n, cache, names = ARGV[1], ARGV[2], {}, 0, {}, {}
want(names, tag, ':b:', reads, 6)
prefetch(cache, names)
for i = 1, string.len(reads), 6 do
  local bin = cache[tag .. ':b:' .. string.sub(reads, i, i + 1)]
  local from = struct.unpack('<I4', reads, i + 2)
  if from < string.len(bin) then
    n = n + 1
    out[n] = struct.pack('<I4I4', (i - 1) / 6, string.len(bin) - from) .. string.sub(bin, from + 1)
  end
end
return table.concat(out)
