"""The process's metrics, in Prometheus' client library (``GET /metrics``).

Every metric tasklease counts is declared here, so a name is defined once and every
layer that counts (the store's round trips, the transport's requests, the engine's
outcomes, a model call's tokens) imports the same object.

Labels never carry a tenant: ``/metrics`` is served without an API key (as Prometheus
scrapes it), so a tenant's name must not leak through it. Counting never fails a job:
``count``/``observe`` swallow an error and log it once per process.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.states import JobState

log = logging.getLogger(__name__)

MODEL_TOKENS = Counter(
    "tasklease_model_tokens",
    "Tokens model providers reported, by job kind, model and direction (input, output).",
    ["kind", "model", "direction"],
)
MODEL_COST = Counter(
    "tasklease_model_cost_dollars",
    "Estimated cost of model calls in US dollars (TASKLEASE_MODEL_PRICES), by kind and model.",
    ["kind", "model"],
)

SUBMISSIONS = Counter(
    "tasklease_jobs_submitted",
    "Jobs submitted, by kind; replay=true: an Idempotency-Key replay answered from the "
    "earlier job (nothing written).",
    ["kind", "replay"],
)
COMPLETIONS = Counter(
    "tasklease_jobs_completed",
    "Jobs that ended, by kind and outcome (succeeded, cancelled, dead_lettered): every "
    "transition into one of these states, once, whatever wrote it (a worker, the API's or "
    "the CLI's cancel and the children it cancelled, the sweeper).",
    ["kind", "outcome"],
)
RETRIES = Counter(
    "tasklease_job_retries", "Attempts that failed and were scheduled for a retry.", ["kind"]
)
DEAD_LETTERS = Counter(
    "tasklease_dead_letters",
    "Jobs dead-lettered, by who did it (engine: out of attempts or a permanent error; "
    "sweeper: a dead letter SQS moved itself, reconciled; deadline: the run's deadline "
    "passed).",
    ["by"],
)
THROTTLES = Counter(
    "tasklease_model_throttles",
    "Model calls a provider throttled (429, 503 with Retry-After), by provider and model: "
    "retried after its delay without using an attempt.",
    ["provider", "model"],
)
BUDGET_WAITS = Counter(
    "tasklease_model_budget_waits",
    "Model calls that waited for a budget instead of going out, by budget (model: "
    "TASKLEASE_MODEL_BUDGETS' minute; tenant_day: a tenant's daily tokens).",
    ["budget"],
)
REDRIVES = Counter("tasklease_redrives", "Dead-lettered jobs redriven (reset to queued).")
RELEASED = Counter(
    "tasklease_parked_released",
    "Parked jobs released (unparked and sent) as their tenant's window on the queue had room.",
)
DEFERRED = Counter(
    "tasklease_claims_deferred",
    "Deliveries not claimed because the job's tenant was at its running cap (the message "
    "handed back, no attempt used), by how: visibility (handed back) or resent (a fresh "
    "message, before SQS's receive count reached the redrive policy's maxReceiveCount).",
    ["how"],
)
KEY_HELD = Counter(
    "tasklease_key_held",
    "Deliveries of keyed jobs not claimed because of their key's limits (flow control), by "
    "kind and by: concurrency (its key's jobs ahead of it; a queued one parked) or rate. "
    "Never labelled by key: keys are unbounded.",
    ["kind", "by"],
)
KEY_DECISIONS = Counter(
    "tasklease_key_decisions",
    "Submissions a key's policy decided, by kind and decision: rejected (409, a job of "
    "the key active), dropped (answered with the active job), cancelled_active (the "
    "active jobs cancelled for the new one), debounced (earlier jobs replaced).",
    ["kind", "decision"],
)
WAKEUPS = Counter(
    "tasklease_wakeups",
    "Wake-ups of waiting jobs, by path. Timer messages sent: submit (a delayed job), "
    "suspend, early (a message that came early, re-delayed), sweeper. Jobs woken: callback "
    "(an answer), message (a message on the topic it waited on), child (a child finished), "
    "answered (an answer that woke nobody, repaired).",
    ["path"],
)
OUTBOX_RELAYED = Counter(
    "tasklease_outbox_relayed", "Outbox rows the sweeper's relay sent (the fast path missed)."
)
SWEEPER_PASSES = Counter("tasklease_sweeper_passes", "Sweeper passes completed.")
ALERT_DELIVERIES = Counter(
    "tasklease_alert_deliveries",
    "Alert deliveries (docs/explain/design.md#alerts), by destination (webhook, "
    "tenant_webhook, eventbridge) and outcome (sent, failed).",
    ["destination", "outcome"],
)
PRUNED = Counter(
    "tasklease_pruned_rows",
    "Rows the retention prune deleted (docs/explain/design.md#retention), by table "
    "(jobs, job_events, job_output, effects, outbox, callbacks) and the state of the jobs "
    "they belonged to.",
    ["table", "state"],
)
EFFECTS = Counter(
    "tasklease_effects",
    "Effects at the end of an attempt, by kind and how (run: the code ran; replayed: the "
    "recorded result was returned).",
    ["kind", "how"],
)
CANCELS = Counter(
    "tasklease_cancels_delivered",
    "Running attempts a worker stopped because their job's cancel was asked for, by how it "
    "learnt of it: notify (LISTEN/NOTIFY, at once), heartbeat (its next heartbeat), recheck "
    "(the check after its LISTEN connection came back), write (a fenced write refused).",
    ["how"],
)
SQS_REQUESTS = Counter(
    "tasklease_sqs_requests", "Requests made to SQS, by action (API operation name).", ["action"]
)
REDIS_REQUESTS = Counter(
    "tasklease_redis_requests",
    "Requests the Redis carrier made, by step (its script's name, XREADGROUP or XADD).",
    ["step"],
)
PG_ROUND_TRIPS = Counter(
    "tasklease_pg_round_trips", "Statements sent to PostgreSQL by the store's executor."
)

# Seconds from tens of milliseconds to an hour (long AI work).
_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, float("inf"))
QUEUED_TO_LEASED = Histogram(
    "tasklease_job_queued_to_leased_seconds",
    "From a job's submission to its first lease (jobs submitted to run now).",
    ["kind"],
    buckets=_BUCKETS,
)
RUN_TIME = Histogram(
    "tasklease_job_run_seconds",
    "An attempt's run, from its start to its outcome, by kind and outcome "
    "(succeeded, retrying, dead_lettered, cancelled, waiting).",
    ["kind", "outcome"],
    buckets=_BUCKETS,
)
SUBMIT_TO_DONE = Histogram(
    "tasklease_job_submit_to_done_seconds",
    "From a job's submission to its end, by kind and outcome.",
    ["kind", "outcome"],
    buckets=_BUCKETS,
)

_warned = False
# Each metric's child per label values, bound once: ``Counter.labels`` validates and
# looks the labels up under a lock on every call, a few microseconds on every job's path
# (issue 37). Labels never carry a tenant or a key, so this stays small.
_children: dict[tuple[Counter | Histogram, tuple[tuple[str, str], ...]], Any] = {}


def _failed(what: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning("counting %s failed; metrics may be short", what, exc_info=True)


def _child(metric: Counter | Histogram, labels: dict[str, str]) -> Any:
    """``metric.labels(**labels)``, bound at its first use and reused after."""
    key = (metric, tuple(labels.items()))
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(**labels)
    return child


def count(metric: Counter, amount: float = 1, **labels: str) -> None:
    """Add ``amount`` to the counter; never raises."""
    if amount <= 0:
        return
    try:
        (_child(metric, labels) if labels else metric).inc(amount)
    except Exception:
        _failed(getattr(metric, "_name", "a metric"))


def observe(metric: Histogram, value: float, **labels: str) -> None:
    """Observe a duration (clamped at 0: clocks of two machines); never raises."""
    try:
        (_child(metric, labels) if labels else metric).observe(max(0.0, value))
    except Exception:
        _failed(getattr(metric, "_name", "a metric"))


def ended(kind: str, outcome: str, created_at: dt.datetime) -> None:
    """A job's end (a transition into succeeded, dead_lettered or cancelled), counted once
    by the store where it was written (app/store/endings.py): its outcome and its time
    from submission. Never raises."""
    count(COMPLETIONS, kind=kind, outcome=outcome)
    observe(SUBMIT_TO_DONE, time.time() - created_at.timestamp(), kind=kind, outcome=outcome)


def count_sqs_request(model: Any = None, **_: Any) -> None:
    """A botocore ``before-call`` handler: one request, named by its operation."""
    count(SQS_REQUESTS, action=str(getattr(model, "name", "unknown")))


class Scraped(Collector):
    """The figures read at scrape time (jobs by state and kind, the oldest queued job's
    age, the DLQ's depth), yielded by a collector from the last ``set``: the API reads
    them (app/services/gauges.py) before it renders ``GET /metrics``. A process that
    never reads them (a worker) yields none of these families."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], int] | None = None
        self.oldest_queued_seconds: float | None = None
        self.dlq: dict[str, int] | None = None

    def set(
        self,
        jobs: dict[tuple[str, str], int] | None,
        oldest_queued_seconds: float | None,
        dlq: dict[str, int] | None,
    ) -> None:
        self.jobs, self.oldest_queued_seconds, self.dlq = jobs, oldest_queued_seconds, dlq

    def describe(self) -> list[Metric]:
        return []  # the families exist only once read: no name clash checks needed

    def collect(self) -> Iterator[Metric]:
        if self.jobs is not None:
            family = GaugeMetricFamily(
                "tasklease_jobs",
                "Jobs by state and kind, every tenant's.",
                labels=["state", "kind"],
            )
            kinds = {kind for _, kind in self.jobs}
            for state in JobState:
                for kind in sorted(kinds):
                    family.add_metric([state.value, kind], self.jobs.get((state.value, kind), 0))
            yield family
            yield GaugeMetricFamily(
                "tasklease_oldest_queued_job_age_seconds",
                "Age of the oldest queued job (0: none queued).",
                value=self.oldest_queued_seconds or 0.0,
            )
        if self.dlq is not None:
            dlq = GaugeMetricFamily(
                "tasklease_dlq_messages",
                "Messages in the dead-letter queue, by SQS's approximate count (visible, "
                "not_visible, delayed).",
                labels=["which"],
            )
            for attribute, n in sorted(self.dlq.items()):
                which = attribute.removeprefix("ApproximateNumberOfMessages").lower() or "visible"
                dlq.add_metric([which.replace("notvisible", "not_visible")], n)
            yield dlq


SCRAPED = Scraped()
REGISTRY.register(SCRAPED)
