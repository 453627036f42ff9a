"""``make bench``: tasklease end to end against the broker's and the database's own limits,
and against Celery (issue 6, "The benchmark"). See bench/run.py."""

from app.tools.stack.stack import with_demo_kinds

# The bench's jobs are the demos' kinds (demo.noop, support.triage, ...): named in
# TASKLEASE_KINDS like a user's kinds, for this process and every one it starts.
with_demo_kinds()
