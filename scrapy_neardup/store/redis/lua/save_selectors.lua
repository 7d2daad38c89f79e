-- KEYS[1]: P:selectors (a field a selector, its JSON), KEYS[2]: P:selectors_changed (a member a selector, scored
-- by the save that changed it last). ARGV: name, JSON, name, JSON, ... Reply: the save's number.
-- One script, so that saves are numbered in the order they are made: a process that read up to a number has
-- read every save numbered up to it.
local top = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local number = (tonumber(top[2]) or 0) + 1
for i = 1, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[2], number, ARGV[i])
end
return number
