-- ARGV: tag, then 12 bytes: u32 id of the canonical to re-point, u32 id of its group's new canonical, f32
-- similarity. The record is changed in place (its canonical id and similarity), only while it is still
-- canonical itself. Reply: 1 re-pointed, 0 not (no record, or no longer canonical).
local tag, q = ARGV[1], ARGV[2]
local old = u32(q, 1)
local name = record_bin(tag, old)
local bin = redis.call('GET', name) or ''
local at, size = record_at(bin, old % 64)
if not at or size < 15 or u32(bin, at + 4) ~= 0 then return 0 end
redis.call('SETRANGE', name, at + 3, string.sub(q, 5, 12))
return 1
