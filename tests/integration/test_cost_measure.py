"""`make cost`'s measurement on real parts (embedded PostgreSQL with pg_stat_statements,
moto's SQS server behind the counting proxy), a handful of jobs: the figures it writes
are counts the pricing can trust."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import cost_model
from app.cli.cost_prices import load_prices

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
        "--sweeps",
        "2",
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


def test_every_job_was_submitted_and_handed_to_the_worker(figures: dict) -> None:
    for kind in ("demo.noop", "support.triage"):
        single, batch, trickle = (
            figures["kinds"][kind][m] for m in ("single", "batch", "one_per_invocation")
        )
        assert single["api"]["invocations"] == 10
        assert batch["api"]["invocations"] == 1  # ten jobs in one POST /v1/jobs/batch
        for run in (single, batch, trickle):
            assert run["worker"]["event_source"]["records"] == run["jobs"]
            assert run["worker"]["event_source"]["ReceiveMessage"] == run["worker"]["invocations"]
            assert (
                run["worker"]["event_source"]["DeleteMessageBatch"] == run["worker"]["invocations"]
            )
            assert run["api"]["pg_round_trips"] > 0
            assert run["worker"]["pg_round_trips"] > 0
            assert run["api"]["billed_mean_ms"] >= 1
            assert run["worker"]["billed_mean_ms"] >= 1
        # at least one SendMessage* per single submission, the code's own (through the proxy)
        sends = {
            a: n for a, n in single["api"]["sqs"]["calls"].items() if a.startswith("SendMessage")
        }
        assert sum(sends.values()) >= 10
        assert trickle["worker"]["invocations"] == trickle["jobs"]  # one record each


def test_triage_writes_more_than_noop_and_the_sweeper_idles(figures: dict) -> None:
    noop, triage = figures["kinds"]["demo.noop"], figures["kinds"]["support.triage"]
    assert triage["effect_results_bytes"] > noop["effect_results_bytes"] == 0
    assert triage["model_calls_per_job"] == 1
    idle = figures["sweeper_idle"]
    assert idle["invocations"] == 2
    assert idle["pg_round_trips"] > 0


def test_the_figures_price(figures: dict) -> None:
    doc = cost_model.price(figures, load_prices(), cost_model.Options())
    assert all(r["total_usd"] > 0 for r in doc["per_million_jobs"])
