"""The worker function's memory against `make cost`'s measured peak per kind (issue 36:
"the worker function's memory sized from measurement"): the rule's arithmetic, the
committed figures justify each profile's worker memory, a peak the memory does not cover
is said in the text and --json, and a figures file without the peak is refused."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.cli.cost import FIGURES
from app.cli.main import cli
from app.cost import memory as cmem
from app.cost import profiles as cp
from app.cost import sides
from app.cost.figures import load_figures
from app.cost.prices import load_prices
from tests.unit.test_cost_cli import wide_console  # noqa: F401 (autouse: unwrapped output)
from tests.unit.test_cost_model import FIGURES as HAND_FIGURES
from tests.unit.test_cost_model import prices

pytestmark = pytest.mark.unit


def test_the_need_is_the_peak_plus_the_runtimes_share_with_headroom() -> None:
    assert cmem.RUNTIME_SHARE_MB == 32 and cmem.HEADROOM == 1.5
    assert cmem.needed_mb(90.0) == 183  # (90 + 32) x 1.5
    assert cmem.needed_mb(90.1) == 184  # rounded up, never down
    figures = copy.deepcopy(HAND_FIGURES)
    figures["kinds"]["j"] = {
        **figures["kinds"]["k"],
        "worker_memory": {"jobs": 1, "peak_rss_mb": 140.0},
    }
    m = cmem.worker_memory(figures, 256)
    # the most any kind needs: (140 + 32) x 1.5 = 258 > 256
    assert m["needed_mb_by_kind"] == {"k": 183, "j": 258}
    assert m["needed_mb"] == 258 and not m["enough"]
    assert cmem.worker_memory(figures, 258)["enough"]


def test_the_committed_peaks_justify_each_profiles_worker_memory() -> None:
    """bench/results/cost.json's measured peaks (make cost, or its --memory-only run):
    the small profile's 256 MB covers each kind's peak plus the runtime's share, with the
    headroom; a peak measured higher, or the profile's memory lowered, fails here."""
    raw = json.loads(FIGURES.read_text())
    peaks = {k: fig["worker_memory"]["peak_rss_mb"] for k, fig in raw["kinds"].items()}
    assert set(peaks) == {"demo.noop", "support.triage"}
    need = max(math.ceil((p + 32) * 1.5) for p in peaks.values())
    assert cp.PROFILES["small"].worker_memory_mb >= need
    doc = sides.price_profiles(load_figures(FIGURES), load_prices(), "production")
    for name, entry in doc["profiles"].items():
        m = entry["worker_memory"]
        assert m["peak_rss_mb_by_kind"] == peaks
        assert m["needed_mb"] == need
        assert m["worker_memory_mb"] == cp.PROFILES[name].worker_memory_mb
        assert m["enough"], (name, m)


def _run(figures: dict[str, Any], tmp_path: Path, *args: str) -> tuple[int, str]:
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(figures))
    result = CliRunner().invoke(cli, ["cost", "--figures", str(path), *args])
    return result.exit_code, result.output


def test_a_peak_the_worker_memory_does_not_cover_is_said(tmp_path: Path) -> None:
    figures = copy.deepcopy(HAND_FIGURES)
    figures["kinds"]["k"]["worker_memory"]["peak_rss_mb"] = 150.0  # needs 273 MB
    code, out = _run(figures, tmp_path, "--model-seconds", "1")
    assert code == 0, out
    assert (
        "small profile: worker 256 MB; measured peak resident memory k 150 MB; needs 273 MB" in out
    )
    assert "needs 273 MB ((peak resident memory + 32 MB" in out
    small = next(x for x in out.splitlines() if x.startswith("- small profile: worker"))
    production = next(x for x in out.splitlines() if x.startswith("- production profile: worker"))
    assert small.endswith(": NOT enough")
    assert production.endswith(": enough")
    code, out = _run(figures, tmp_path, "--json", "--model-seconds", "1")
    doc = json.loads(out)
    assert doc["profiles"]["small"]["worker_memory"]["enough"] is False
    assert doc["profiles"]["production"]["worker_memory"]["enough"] is True
    assert doc["worker_memory"]["needed_mb"] == 273
    # --worker-memory-mb sets both profiles' memory: 273 MB covers it
    code, out = _run(figures, tmp_path, "--json", "--worker-memory-mb", "273")
    assert all(p["worker_memory"]["enough"] for p in json.loads(out)["profiles"].values())


def test_priced_with_hand_figures_the_report_carries_the_memory() -> None:
    doc = sides.price_profiles(HAND_FIGURES, prices(), "small", model_seconds=1.0)
    assert doc["worker_memory"]["peak_rss_mb_by_kind"] == {"k": 90.0}
    assert doc["worker_memory"]["worker_memory_mb"] == 256
