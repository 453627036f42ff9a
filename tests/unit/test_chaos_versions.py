"""The chaos gate's deployed kind (demo.revised, app/demos/revised_v1.py and _v2.py) and
the checker on it (app/tools/chaos/per_version.py): a job started on version 1 and woken
on version 2 skips the review (it drafted without one) and sends the notice; the gate
fails on a job of the kind not succeeded, its flags disagreeing with its record, the
review taken after the draft, or no version recorded. Pure: in memory, facts in."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from app.demos import revised_v1, revised_v2
from app.kinds.memory_store import EffectStore
from app.kinds.testing import KindSuspended, run_kind
from app.tools.chaos.per_version import version_check
from tests.unit.test_chaos_checker import job

pytestmark = pytest.mark.unit


def rows(job_id: str, store: EffectStore) -> dict[str, dict[str, Any]]:
    """The store's records as the checker reads effects: by key, seq in recorded order."""
    return {
        key: {"job_id": job_id, "key": key, "seq": seq, "shape": store.shapes.get(key)}
        for seq, key in enumerate(store.records)
    }


async def ran(first: Any, then: Any) -> tuple[Any, EffectStore]:
    """A job run on ``first`` until its nap, then woken on ``then``: (its result, store)."""
    with pytest.raises(KindSuspended) as waits:
        await run_kind(first, {"nap_seconds": 5})
    waits.value.store.clock += dt.timedelta(seconds=6)
    done = await waits.value.resume(then, {"nap_seconds": 5})
    return done.result, waits.value.store


@pytest.mark.asyncio
async def test_jobs_across_the_deploy_take_only_the_patches_ahead_of_them_and_pass() -> None:
    crossed, crossed_store = await ran(revised_v1.revised, revised_v2.revised)
    assert crossed == {"version": "2", "reviewed": False, "notified": True}
    steps = ["draft", "sleep:nap", "patch:notify", "notify", "publish"]
    assert list(crossed_store.records) == steps
    new, new_store = await ran(revised_v2.revised, revised_v2.revised)
    assert new == {"version": "2", "reviewed": True, "notified": True}
    old, old_store = await ran(revised_v1.revised, revised_v1.revised)
    assert old == {"version": "1"}
    jobs = [
        job("a", "demo.revised", result=crossed, kind_version="1"),
        job("b", "demo.revised", result=new, kind_version="2"),
        job("c", "demo.revised", result=old, kind_version="1"),
    ]
    effects = {"a": rows("a", crossed_store), "b": rows("b", new_store), "c": rows("c", old_store)}
    counts, findings = version_check(jobs, effects)
    assert findings == []
    assert counts == {
        "jobs": 3,
        "succeeded": 3,
        "v1_to_v1": 1,
        "v1_to_v2": 1,
        "v2_to_v2": 1,
        "reviewed": 1,
        "notified": 2,
    }

    # Each broken case is a finding naming what broke
    late_review = {**effects["b"], "patch:review": {**effects["b"]["patch:review"], "seq": 9}}
    unmarked = {k: v for k, v in effects["a"].items() if k != "patch:notify"}
    broken = [
        (
            job("d", "demo.revised", "dead_lettered", last_error="permanent: replay diverged"),
            {},
            "ended dead_lettered: 'permanent: replay diverged'",
        ),
        (job("e", "demo.revised", result=new, kind_version="2"), late_review, "after the draft"),
        (
            job("f", "demo.revised", result=crossed, kind_version="1"),
            unmarked,
            "notified is True but 'patch:notify' is not recorded",
        ),
        (
            job("g", "demo.revised", result=crossed, kind_version=None),
            effects["a"],
            "first version recorded as None",
        ),
        (
            job("h", "demo.revised", result=old, kind_version="2"),
            effects["c"],
            "started on version 2, finished on version 1",
        ),
    ]
    for row, its, why in broken:
        _, found = version_check([row], {row["id"]: its})
        assert [w for _, w in found if why in w], (row["id"], found)
