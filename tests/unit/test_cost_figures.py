"""A figures file that is wrong is refused before anything is priced, naming the field:
never a KeyError, ZeroDivisionError or AttributeError from deep in the arithmetic."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app import errors
from app.cost.figures import load_figures, parse_figures
from tests.unit.test_cost_model import FIGURES

pytestmark = pytest.mark.unit


def refused(change: Callable[[dict[str, Any]], None]) -> str:
    doc = copy.deepcopy(FIGURES)
    change(doc)
    with pytest.raises(errors.ConfigError) as info:
        parse_figures(doc, "f.json")
    return str(info.value)


def test_the_hand_made_figures_pass() -> None:
    assert parse_figures(copy.deepcopy(FIGURES), "f.json")["kinds"]["k"]["single"]["jobs"] == 10


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d["kinds"]["k"].pop("one_per_invocation"), "kinds.k.one_per_invocation"),
        (lambda d: d.pop("sweeper_idle"), "sweeper_idle"),
        (lambda d: d["kinds"]["k"]["single"].update(jobs=0), "kinds.k.single.jobs"),
        (lambda d: d.update(kinds=[]), "kinds"),
        (lambda d: d.update(kinds={}), "kinds"),
        (lambda d: d["sweeper_idle"].update(invocations=0), "sweeper_idle.invocations"),
        (
            lambda d: d["kinds"]["k"]["batch"]["api"].update(billed_mean_ms=-1),
            "kinds.k.batch.api.billed_mean_ms",
        ),
        (
            lambda d: d["kinds"]["k"]["batch"]["worker"].update(log_bytes="12"),
            "kinds.k.batch.worker.log_bytes",
        ),
        (
            lambda d: d["kinds"]["k"].update(payload_bytes=10**400),
            "kinds.k.payload_bytes",
        ),
        (
            lambda d: d["kinds"]["k"]["single"]["worker"].pop("event_source"),
            "kinds.k.single.worker.event_source",
        ),
        (
            lambda d: d["kinds"]["k"]["single"]["worker"].update(invocations=0),
            "kinds.k.single.worker.invocations",
        ),
        (
            lambda d: d["kinds"]["k"]["batch"]["api"].update(invocations=0),
            "kinds.k.batch.api.invocations",
        ),
        (
            lambda d: d["kinds"]["k"]["one_per_invocation"]["worker"].update(invocations=2),
            "kinds.k.one_per_invocation.worker.invocations",
        ),
        (lambda d: d["emf_metrics"].append(d["emf_metrics"][0]), "emf_metrics.3"),
        (lambda d: d["kinds"]["k"].pop("worker_memory"), "kinds.k.worker_memory"),
        (
            lambda d: d["kinds"]["k"]["worker_memory"].update(peak_rss_mb=0),
            "kinds.k.worker_memory.peak_rss_mb",
        ),
        (lambda d: d.pop("measured_at"), "measured_at"),
        (lambda d: d.update(measured_at=""), "measured_at"),
    ],
)
def test_a_bad_figure_is_named(change: Callable[[dict[str, Any]], None], named: str) -> None:
    message = refused(change)
    assert message.startswith(f"f.json: {named}:"), message


def test_another_version_says_to_measure_again() -> None:
    assert "run `make cost` again" in refused(lambda d: d.update(figures_version=99))


def test_a_directory_or_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="cannot be read"):
        load_figures(tmp_path)
    with pytest.raises(errors.ConfigError, match="does not exist"):
        load_figures(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(errors.ConfigError, match="is not JSON"):
        load_figures(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(FIGURES))
    assert load_figures(good)["figures_version"] == 2
