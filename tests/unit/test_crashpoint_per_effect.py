"""``TASKLEASE_CRASH_AT=after_effect@<key>``: a crash point armed for one effect only, so
a test can kill a real worker after a given step (the second of an agent's tool calls)
rather than at the first effect."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from app.crashpoints import CONSENT
from tests.unit.test_public_sdk import ROOT

pytestmark = pytest.mark.unit

CODE = """
from app.crashpoints import Point, hit
hit(Point.AFTER_EFFECT, effect="pai:tool:search:call_1_search")
print("passed the first tool", flush=True)
hit(Point.INSIDE_EFFECT, effect="pai:tool:read_page:call_2_read_page")
print("passed inside the second", flush=True)
hit(Point.AFTER_EFFECT, effect="pai:tool:read_page:call_2_read_page")
print("never printed", flush=True)
"""


def run(armed: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TASKLEASE_CRASH_AT": armed, "TASKLEASE_ALLOW_CRASH_POINTS": CONSENT}
    return subprocess.run(
        [sys.executable, "-c", CODE], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_a_point_armed_for_one_effect_kills_there_and_nowhere_else() -> None:
    done = run("after_effect@pai:tool:read_page:call_2_read_page")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.splitlines() == ["passed the first tool", "passed inside the second"]


def test_an_unknown_point_before_the_key_is_refused_naming_it() -> None:
    done = run("after_efect@pai:model:0")
    assert done.returncode == 1
    assert "names unknown points ['after_efect']" in done.stderr
