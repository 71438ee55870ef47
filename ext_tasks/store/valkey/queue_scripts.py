"""The run queue's scripts, each on one partition's stream (one slot): reclaiming idle runs (and
trimming what every reader acknowledged), keeping a worker's runs (and telling it which it lost),
giving a run back, queueing the scheduled runs that are due, and queueing named ones at once (waking
them)."""

from __future__ import annotations

from typing import Final

from ..connection.scripts import Script

RECLAIM: Final = Script(
    "reclaim idle runs",
    keys=("runs",),
    args=("group", "consumer", "min_idle_ms", "count", "trim"),
    body="""
local found = {}
local taken = {nil, {}}
if tonumber(count) > 0 then
  taken = redis.call('XAUTOCLAIM', runs, group, consumer, min_idle_ms, '0-0', 'COUNT', count)
end
for _, entry in ipairs(taken[2]) do
  local id, fields = entry[1], entry[2]
  if fields then
    local task, after = nil, '0'
    for i = 1, #fields, 2 do
      if fields[i] == 'task' then task = fields[i + 1] elseif fields[i] == 'after' then after = fields[i + 1] end
    end
    local pending = redis.call('XPENDING', runs, group, id, id, 1)
    local deliveries = pending[1] and pending[1][4] or 1
    if task then
      found[#found + 1] = id
      found[#found + 1] = task
      found[#found + 1] = tostring(tonumber(after) + deliveries)
    end
  end
end
if trim == '1' then
  -- Everything below the oldest unacknowledged entry, and below the next undelivered one, is done.
  local summary = redis.call('XPENDING', runs, group)
  local floor = summary[2]
  if not floor then
    for _, info in ipairs(redis.call('XINFO', 'GROUPS', runs)) do
      local named = {}
      for i = 1, #info, 2 do named[info[i]] = info[i + 1] end
      if named['name'] == group then
        local ms, seq = string.match(named['last-delivered-id'], '^(%d+)-(%d+)$')
        if ms then floor = ms .. '-' .. (seq + 1) end
      end
    end
  end
  if floor then redis.call('XTRIM', runs, 'MINID', '~', floor) end
end
return found
""",
)

HEARTBEAT: Final = Script(
    "keep runs",
    keys=("runs",),
    args=("group", "consumer"),
    body="""
-- Re-claiming one's own entries resets their idle time, which is what a reclaim measures (JUSTID leaves
-- their delivery count, the attempts, alone). Only entries still ours: one another worker took over,
-- or one a promoted replica never heard of, is reported lost instead of taken back.
local mine, lost = {}, {}
for _, id in ipairs(rest) do
  local pending = redis.call('XPENDING', runs, group, id, id, 1)
  if pending[1] and pending[1][2] == consumer then mine[#mine + 1] = id else lost[#lost + 1] = id end
end
if #mine > 0 then
  mine[#mine + 1] = 'JUSTID'
  redis.call('XCLAIM', runs, group, consumer, 0, unpack(mine))
end
return lost
""",
)

REQUEUE: Final = Script(
    "give a run back",
    keys=("runs",),
    args=("group", "delivery", "task_id", "after"),
    body="""
redis.call('XADD', runs, '*', 'task', task_id, 'after', after)
redis.call('XACK', runs, group, delivery)
return 1
""",
)

PROMOTE: Final = Script(
    "queue the due runs",
    keys=("due", "runs"),
    args=("now", "count"),
    body="""
-- Each due run is removed and queued in one step: of workers promoting at once, one queues it.
local due_now = redis.call('ZRANGE', due, '-inf', now, 'BYSCORE', 'LIMIT', 0, count)
for _, task in ipairs(due_now) do
  redis.call('XADD', runs, '*', 'task', task)
end
if #due_now > 0 then redis.call('ZREM', due, unpack(due_now)) end
return #due_now
""",
)

WAKE: Final = Script(
    "queue named scheduled runs",
    keys=("due", "runs"),
    args=(),
    body="""
-- The tasks named (rest) whose run is scheduled: removed and queued in one step, each by one waker.
local woken = 0
for _, task in ipairs(rest) do
  if redis.call('ZREM', due, task) == 1 then
    redis.call('XADD', runs, '*', 'task', task)
    woken = woken + 1
  end
end
return woken
""",
)
