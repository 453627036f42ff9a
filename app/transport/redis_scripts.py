"""The Redis carrier's server-side steps, each one Lua script so that it is atomic: a
process that dies between two commands of a step cannot lose or double a message.

Keys of one queue ``S`` (a stream): ``S`` itself, with the consumer group ``tasklease``;
``S:delayed``, a sorted set of messages not yet due (member: the JSON of the entry's
fields and a nonce, score: when it is due, in the server's milliseconds); ``S:cursor``,
where the last XAUTOCLAIM stopped. An entry's fields: ``b`` the body, ``a`` its message
attributes (JSON), ``t`` when it was first sent (ms), ``g`` its tenant (the message group),
``r`` the receives it had before it was last re-scheduled, ``why`` a dead letter's reason.

Every script reads the clock with TIME: the server's clock is the only one all workers
share. ``redis.replicate_commands()`` is called first, as Redis 6.2 (the embedded server)
needs it before a write that follows TIME; Redis 7 always replicates effects.
"""

from __future__ import annotations

# KEYS: the stream, its delayed set. ARGV: the delay in ms, then the members.
SEND_DELAYED = """
pcall(redis.replicate_commands)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = now + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[2], due, ARGV[i])
end
return now
"""

# What TAKE and the others share: the clock, moving due messages onto the stream, and
# the dead-lettering of an entry past maxReceiveCount.
_COMMON = """
pcall(redis.replicate_commands)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function promote(stream, delayed, limit)
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  for _, member in ipairs(due) do
    local m = cjson.decode(member)
    redis.call('XADD', stream, '*', unpack(m['f']))
    redis.call('ZREM', delayed, member)
  end
  return #due
end

local function field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end

local function without(fields, name)
  local out = {}
  for i = 1, #fields, 2 do
    if fields[i] ~= name then
      out[#out + 1] = fields[i]
      out[#out + 1] = fields[i + 1]
    end
  end
  return out
end

local function next_due(delayed)
  local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return math.max(0, tonumber(first[2]) - now)
end
"""

# KEYS: the stream, its delayed set, its cursor, the paired dead-letter stream.
# ARGV: group, consumer, min idle (ms, the visibility timeout), count, maxReceiveCount
# (0: none), how many due messages to move at most.
# Moves due delayed messages onto the stream, then takes over up to ``count`` entries whose
# lease ran out (XAUTOCLAIM from where the last call stopped): the redeliveries. An entry
# received more than maxReceiveCount times goes to the dead-letter stream instead, as SQS's
# redrive policy moves it. Returns {ms until the next delayed message is due (-1: none),
# {id, receives, fields}...}.
TAKE = (
    _COMMON
    + """
local stream, delayed, cursor, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, consumer = ARGV[1], ARGV[2]
local min_idle, count, max_receives = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
promote(stream, delayed, tonumber(ARGV[6]))
local start = redis.call('GET', cursor) or '0-0'
local claimed = redis.call('XAUTOCLAIM', stream, group, consumer, min_idle, start, 'COUNT', count)
if claimed[1] ~= start then redis.call('SET', cursor, claimed[1]) end
local out = {next_due(delayed)}
for _, entry in ipairs(claimed[2]) do
  local id, fields = entry[1], entry[2]
  if not fields then
    -- Deleted while pending (Redis 6.2 answers nil for it): nothing to deliver.
    redis.call('XACK', stream, group, id)
  else
    local p = redis.call('XPENDING', stream, group, id, id, 1)
    local receives = tonumber(p[1][4]) + tonumber(field(fields, 'r') or '0')
    if max_receives > 0 and receives > max_receives then
      local moved = without(without(fields, 'why'), 'r')
      moved[#moved + 1] = 'why'
      moved[#moved + 1] = 'received ' .. receives .. ' times (maxReceiveCount ' .. max_receives .. ')'
      redis.call('XADD', dlq, '*', unpack(moved))
      redis.call('XACK', stream, group, id)
      redis.call('XDEL', stream, id)
    else
      out[#out + 1] = {id, receives, fields}
    end
  end
end
return out
"""
)

# KEYS: the stream. ARGV: group, then (id, receives) pairs: the handles to delete.
# An entry is acknowledged and deleted only while the handle is its newest delivery (the
# delivery count matches); a handle that is stale (the entry was delivered again since)
# deletes nothing and is not a failure, as on SQS. Returns how many were deleted.
DELETE = """
local stream, group = KEYS[1], ARGV[1]
local deleted = 0
for i = 2, #ARGV, 2 do
  local id, count = ARGV[i], tonumber(ARGV[i + 1])
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if #p == 0 or tonumber(p[1][4]) == count then
    redis.call('XACK', stream, group, id)
    deleted = deleted + redis.call('XDEL', stream, id)
  end
end
return deleted
"""

# KEYS: the stream, its delayed set. ARGV: group, consumer, id, receives (the handle's
# delivery count), seconds (ms), the stream's visibility timeout (ms).
# The lease of a received entry: visible again after ``seconds``. Within the visibility
# timeout the entry stays pending and its idle time is set so that XAUTOCLAIM takes it at
# the right moment (a heartbeat sets it to 0: XCLAIM ... IDLE 0 JUSTID, which leaves the
# delivery count alone); a longer delay (a retry's backoff) moves it to the delayed set,
# carrying its receive count, in this one step. Returns 1, or 0 when the handle is stale.
CHANGE_VISIBILITY = (
    _COMMON
    + """
local stream, delayed = KEYS[1], KEYS[2]
local group, consumer, id = ARGV[1], ARGV[2], ARGV[3]
local count, delay, visibility = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local p = redis.call('XPENDING', stream, group, id, id, 1)
if #p == 0 or tonumber(p[1][4]) ~= count then return 0 end
if delay <= visibility then
  redis.call('XCLAIM', stream, group, consumer, 0, id, 'IDLE', visibility - delay, 'JUSTID')
  return 1
end
local entry = redis.call('XRANGE', stream, id, id)
if #entry == 0 then return 0 end
local fields = without(entry[1][2], 'r')
fields[#fields + 1] = 'r'
fields[#fields + 1] = tostring(count + tonumber(field(entry[1][2], 'r') or '0'))
redis.call('ZADD', delayed, now + delay, cjson.encode({f = fields, n = id}))
redis.call('XACK', stream, group, id)
redis.call('XDEL', stream, id)
return 1
"""
)

# KEYS: the stream, the dead-letter stream. ARGV: group, id, count, reason.
# A received entry that may not be delivered (past maxReceiveCount on a fresh read, which
# only a re-scheduled entry can be) moves to the dead-letter stream with its reason.
DEAD_LETTER = (
    _COMMON
    + """
local stream, dlq, group, id = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local entry = redis.call('XRANGE', stream, id, id)
if #entry == 0 then return 0 end
local moved = without(without(entry[1][2], 'why'), 'r')
moved[#moved + 1] = 'why'
moved[#moved + 1] = ARGV[4]
redis.call('XADD', dlq, '*', unpack(moved))
redis.call('XACK', stream, group, id)
redis.call('XDEL', stream, id)
return 1
"""
)

# KEYS: the source stream, the dead-letter stream. ARGV: group, then (id, receives, the
# fields as JSON) triples. A redrive: each dead letter is added back to the source stream
# and deleted from the dead-letter stream in one step, so it is never on both or neither.
# Returns the ids moved.
MOVE_BACK = """
local source, dlq, group = KEYS[1], KEYS[2], ARGV[1]
local moved = {}
for i = 2, #ARGV, 3 do
  local id, count = ARGV[i], tonumber(ARGV[i + 1])
  local p = redis.call('XPENDING', dlq, group, id, id, 1)
  if #p == 0 or tonumber(p[1][4]) == count then
    redis.call('XADD', source, '*', unpack(cjson.decode(ARGV[i + 2])))
    redis.call('XACK', dlq, group, id)
    redis.call('XDEL', dlq, id)
    moved[#moved + 1] = id
  end
end
return moved
"""

# KEYS: the stream, its delayed set. ARGV: group, the visibility timeout (ms), how many
# expired leases to count at most.
# A queue's counts as SQS gives them: an entry whose lease ran out, and a delayed one
# that is due, are visible (the next receive takes them, as on SQS), not in flight or
# delayed. Read-only. Returns {visible, in flight, delayed}.
DEPTH = """
local stream, delayed, group = KEYS[1], KEYS[2], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local length = redis.call('XLEN', stream)
local pending, expired = 0, 0
if length > 0 then
  local summary = redis.pcall('XPENDING', stream, group)
  if type(summary) == 'table' and not summary.err then
    pending = tonumber(summary[1])
    if pending > 0 then
      expired = #redis.call('XPENDING', stream, group, 'IDLE', ARGV[2], '-', '+', ARGV[3])
    end
  end
end
local waiting = redis.call('ZCARD', delayed)
local due = redis.call('ZCOUNT', delayed, '-inf', now)
return {length - pending + expired + due, pending - expired, waiting - due}
"""
