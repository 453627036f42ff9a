"""`make cost`'s measurement on real parts (embedded PostgreSQL with pg_stat_statements,
moto's SQS server behind the counting proxy), a handful of jobs: the figures it writes
are counts the pricing can trust."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from app.cost import base as cost_base
from app.cost import model as cost_model
from app.cost.prices import load_prices

pytestmark = [pytest.mark.integration, pytest.mark.sqs_only]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("cost")
    out = d / "cost.json"
    # Its own process: the handlers read their settings from the environment at import.
    args = [
        "--jobs",
        "10",
        "--trickle-jobs",
        "2",
        "--rounds",
        "2",
        "--sweeps",
        "2",
        "--memory-jobs",
        "10",
        "--out",
        str(out),
        "--data-dir",
        str(d / "data"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "bench.cost", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, object] = json.loads(out.read_text())
    return doc


ROUNDS, JOBS, TRICKLE = 2, 10, 2


def test_each_kinds_worker_memory_is_a_fresh_worker_process_peak(figures: dict) -> None:
    """The peak is the worker process's own: it starts at a bare interpreter's (not the
    bench's, as getrusage's ru_maxrss would carry across exec), grows with the handler's
    import and again with the jobs, and every job of the run went through it."""
    for kind in ("demo.noop", "support.triage"):
        m = figures["kinds"][kind]["worker_memory"]
        assert m["jobs"] == 10
        assert m["invocations"] >= 1
        assert 0 < m["interpreter_mb"] < m["after_import_mb"] <= m["peak_rss_mb"]
        # the bench process (API, moto's client, the stack's tools) is over 100 MB: a
        # bare interpreter is a fraction of what importing the worker adds
        assert m["interpreter_mb"] < m["after_import_mb"] - m["interpreter_mb"]


def test_every_job_was_submitted_and_handed_to_the_worker(figures: dict) -> None:
    for kind in ("demo.noop", "support.triage"):
        single, batched, trickle = (
            figures["kinds"][kind][m] for m in ("single", "batch", "one_per_invocation")
        )
        assert single["jobs"] == batched["jobs"] == ROUNDS * JOBS
        assert trickle["jobs"] == ROUNDS * TRICKLE
        assert single["api"]["invocations"] == ROUNDS * JOBS
        assert batched["api"]["invocations"] == ROUNDS  # ten jobs in one POST /v1/jobs/batch
        for run in (single, batched, trickle):
            # the messages the code sent (counted by the proxy) are the records the
            # worker was handed (counted by the event source): each job exactly once
            sent = sum(
                n for a, n in run["api"]["sqs"]["entries"].items() if a.startswith("SendMessage")
            )
            assert sent == run["worker"]["event_source"]["records"] == run["jobs"]
            assert run["api"]["pg_round_trips"] > 0
            assert run["worker"]["pg_round_trips"] > 0
            assert run["api"]["billed_mean_ms"] >= 1
            assert run["worker"]["billed_mean_ms"] >= 1
            assert len(run["worker"]["rounds_billed_mean_ms"]) == ROUNDS


def test_a_backlog_is_received_in_full_batches_and_a_trickle_one_by_one(figures: dict) -> None:
    """The billing model's premise, checked against the queue: from a backlog each
    ReceiveMessage brings batch_size messages (ceil(jobs / batch) receives and deletes
    a round); handed over one at a time, one receive per job."""
    batch = figures["batch_size"]
    for kind in ("demo.noop", "support.triage"):
        k = figures["kinds"][kind]
        for mode in ("single", "batch"):
            source = k[mode]["worker"]["event_source"]
            full = ROUNDS * math.ceil(JOBS / batch)
            assert source["ReceiveMessage"] == full, (kind, mode, source)
            assert source["DeleteMessageBatch"] == full
        trickle = k["one_per_invocation"]["worker"]["event_source"]
        assert trickle["ReceiveMessage"] == trickle["DeleteMessageBatch"] == ROUNDS * TRICKLE


def test_the_emf_lines_name_custom_metrics(figures: dict) -> None:
    metrics = figures["emf_metrics"]
    assert metrics and all(m.startswith("tasklease/") for m in metrics)
    assert any("kind=support.triage" in m for m in metrics)


def test_triage_writes_more_than_noop_and_the_sweeper_idles(figures: dict) -> None:
    noop, triage = figures["kinds"]["demo.noop"], figures["kinds"]["support.triage"]
    assert triage["effect_results_bytes"] > noop["effect_results_bytes"] == 0
    assert triage["model_calls_per_job"] == 1
    idle = figures["sweeper_idle"]
    assert idle["invocations"] == 2
    assert idle["pg_round_trips"] > 0


def test_the_figures_price(figures: dict) -> None:
    doc = cost_model.price(figures, load_prices(), cost_base.Options())
    assert all(r["total_usd"] > 0 for r in doc["per_million_jobs"])
