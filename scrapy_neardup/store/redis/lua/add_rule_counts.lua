-- KEYS[1]: P:urlrules (fields host<TAB>rule<TAB>+ and ...<TAB>-), KEYS[2]: P:urlrules_changed (a member
-- host<TAB>rule, scored by the add that changed it last). ARGV: host<TAB>rule, successes, failures, ...
-- Reply: the add's number. One script, so that adds are numbered in the order they are made: a process that
-- read up to a number has read every add numbered up to it.
local top = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local number = (tonumber(top[2]) or 0) + 1
for i = 1, #ARGV, 3 do
  local successes, failures = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if successes ~= 0 or failures == 0 then redis.call('HINCRBY', KEYS[1], ARGV[i] .. '\t+', successes) end
  if failures ~= 0 then redis.call('HINCRBY', KEYS[1], ARGV[i] .. '\t-', failures) end
  redis.call('ZADD', KEYS[2], number, ARGV[i])
end
return number
