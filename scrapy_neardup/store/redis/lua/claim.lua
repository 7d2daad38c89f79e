local tag, claims, appends, checks = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local out_c, out_a, out_k = {}, {}, {}
local none, sub, call, unpack_u32 = struct.pack('<I4', 0), string.sub, redis.call, struct.unpack
for i = 1, string.len(claims), 18 do
  local name = tag .. ':k:' .. sub(claims, i, i + 1)
  local bin, hash, id = call('GET', name) or '', sub(claims, i + 2, i + 9), sub(claims, i + 10, i + 13)
  local at = find_entry(bin, hash, 12, 1)
  if not at then
    call('APPEND', name, hash .. id); out_c[#out_c + 1] = '1'
  else
    local holder = sub(bin, at + 8, at + 11)
    if holder == id then
      out_c[#out_c + 1] = '1'
    elseif holder == sub(claims, i + 14, i + 17) then
      call('SETRANGE', name, at + 7, id); out_c[#out_c + 1] = '1'
    else
      out_c[#out_c + 1] = 'K'
    end
  end
end
local head, n, k = tag .. ':b:', 0, 0
for i = 1, string.len(appends), 13 do
  local name = head .. sub(appends, i, i + 1)
  local upto = call('APPEND', name, sub(appends, i + 2, i + 8)) - 7
  local seen = unpack_u32('<I4', appends, i + 9)
  if seen ~= upto and seen ~= 4294967295 then  -- (filed without a lookup: nothing to compare)
    n = n + 1
    if seen > upto then
      out_a[n] = struct.pack('<I4I4', k, 4294967295)
    else
      out_a[n] = struct.pack('<I4I4', k, upto - seen) .. call('GETRANGE', name, seen, upto - 1)
    end
  end
  k = k + 1
end
for i = 1, string.len(checks), 4 do
  local id = u32(checks, i)
  local rbin = call('GET', record_bin(tag, id)) or ''
  local at, size = record_at(rbin, id % 64)
  out_k[#out_k + 1] = (at and size >= 15 and sub(rbin, at + 4, at + 7) == none) and '1' or '0'
end
return {table.concat(out_c), table.concat(out_a), table.concat(out_k)}
