-- KEYS[1]: P:budget. ARGV: group, key, budget. Reply: 1 admitted (now or before), 0 the group's budget is spent.
-- A field per group holds its admitted keys, one a line (a URL holds no line break).
local held = redis.call('HGET', KEYS[1], ARGV[1]) or ''
local n = 0
for member in string.gmatch(held, '[^\n]+') do
  if member == ARGV[2] then return 1 end
  n = n + 1
end
if n >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], held .. ARGV[2] .. '\n')
return 1
