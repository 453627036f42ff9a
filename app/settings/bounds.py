"""The bounds of what a caller or a kind may ask for, defined once.

The API's schemas, the CLI, the settings, the kinds registry and the services read
them from here; the SQL CHECK constraints cannot import Python, so
tests/unit/test_bounds.py checks the migrations against these numbers.
"""

from __future__ import annotations

from app.settings import aws_limits

# A job's attempt budget (jobs.max_attempts CHECK, POST /v1/jobs max_attempts,
# TASKLEASE_MAX_ATTEMPTS, @kind(max_attempts=...)).
MIN_ATTEMPTS = 1
MAX_ATTEMPTS = 100
# A job's timeout: the lease is the message's visibility, which SQS caps at 12 hours
# (jobs.timeout_seconds CHECK, POST /v1/jobs timeout_seconds, @kind(timeout_seconds=...)).
MIN_TIMEOUT_SECONDS = 1
MAX_TIMEOUT_SECONDS = aws_limits.MAX_VISIBILITY_SECONDS
# An effect's key (effects.key CHECK, ctx.effect(key, ...)).
MAX_EFFECT_KEY_CHARS = 200
# An Idempotency-Key header.
MAX_IDEMPOTENCY_KEY_CHARS = 200
# A tenant's name (api_keys.tenant CHECK): a letter or digit, then up to 62 of these.
TENANT_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"
# An API key's name (api_keys.name CHECK).
MAX_KEY_NAME_CHARS = 100
# How far ahead a job may be submitted to run (POST /v1/jobs run_at and delay_seconds,
# `tasklease submit --delay/--run-at`): a year, like the longest wait a kind may ask for.
MAX_DELAY_SECONDS = 366 * 24 * 3600
# How far ahead a run's deadline may be (POST /v1/jobs deadline and deadline_seconds,
# `tasklease submit --deadline-seconds`, @kind(deadline_seconds=...)): 366 days, the
# longest whole-execution timeout of Lambda durable functions.
MAX_DEADLINE_SECONDS = 366 * 24 * 3600
# One page of GET /v1/jobs and GET /v1/dead-letters.
MAX_PAGE = 200
# A schedule's cron expression, name and time zone name (schedules CHECKs).
MAX_CRON_CHARS = 100
MAX_SCHEDULE_NAME_CHARS = 100
MAX_TIMEZONE_CHARS = 100
# Messages to a job (POST /v1/jobs/{id}/messages, ctx.receive): a topic's name
# (job_messages.topic CHECK), the messages one job may be sent, and one message's body
# (its JSON, compact, in bytes).
MAX_TOPIC_CHARS = 100
MAX_MESSAGES_PER_JOB = 1000
MAX_MESSAGE_BYTES = 64 * 1024
# The state a job publishes (ctx.set_state, GET /v1/jobs/{id}/state; job_state CHECKs):
# a key's length, a value's size as JSON, and how many keys one job may have.
MAX_STATE_KEY_CHARS = 200
MAX_STATE_VALUE_BYTES = 16 * 1024
MAX_STATE_KEYS = 100
