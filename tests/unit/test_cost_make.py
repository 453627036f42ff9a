"""`make cost`'s recipe with a stand-in for uv: it fails when `tasklease cost` fails
(leaving cost.md as it was), and prices the figures file bench.cost wrote (--out)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

FAKE_UV = """#!/bin/bash
# uv run --no-sync python -m bench.cost ARGS | uv run --no-sync tasklease cost --figures F
shift 2
if [ "$1 $2 $3" = "python -m bench.cost" ]; then
  out=bench/results/cost.json
  while [ $# -gt 0 ]; do [ "$1" = "--out" ] && out=$2; shift; done
  echo "some line a handler printed"
  echo '{}' > "$out"
  echo "$out"
else
  echo "priced: $*"
  exit "${FAKE_PRICING_RC:-0}"
fi
"""


def make_cost(tmp_path: Path, rc: int) -> subprocess.CompletedProcess[str]:
    uv = tmp_path / "uv"
    uv.write_text(FAKE_UV)
    uv.chmod(0o755)
    stamp = tmp_path / "stamp"
    stamp.touch()
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            "cost",
            f"UV={uv}",
            f"STAMP={stamp}",
            f"ARGS=--out {tmp_path / 'x.json'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "FAKE_PRICING_RC": str(rc)},
    )


def test_the_figures_written_are_the_figures_priced(tmp_path: Path) -> None:
    done = make_cost(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "x.md").read_text()
    assert md.startswith("```\n") and md.endswith("```\n")
    assert f"priced: tasklease cost --figures {tmp_path / 'x.json'}" in md


def test_a_failing_pricing_fails_make_and_leaves_cost_md(tmp_path: Path) -> None:
    (tmp_path / "x.md").write_text("the last good tables\n")
    done = make_cost(tmp_path, 2)
    assert done.returncode != 0
    assert "tasklease cost failed" in done.stderr
    assert (tmp_path / "x.md").read_text() == "the last good tables\n"
    assert not list(tmp_path.glob("x.md.tmp*"))
