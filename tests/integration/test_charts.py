"""GET /v1/charts (migration 0027): real jobs flow through the API, the engine and the
carrier, and the buckets the jobs' triggers kept answer the right counts and put a
known latency in the right histogram bucket; a tenant sees only its own series; bad
input is a 422 naming it; retention prunes old buckets and keeps the rest."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from app import store
from app.services import charts, retention
from tests.conftest import Stack, bearer, job_row
from tests.integration.test_auth import Tenants, submit, tenants  # noqa: F401 (the fixture)
from tests.integration.test_metrics_completions import handle, post

# carrier_neutral: the buckets are kept by triggers on jobs, whatever carried the jobs.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


def latency_seconds(sql: Any, job_id: str) -> float:
    row = job_row(sql, job_id)
    return float((row["finished_at"] - row["created_at"]).total_seconds())


def test_the_buckets_count_real_jobs_and_a_known_latency_lands_in_its_bucket(
    api: Any, stack: Stack, sql: Any
) -> None:
    fast_retries = stack.with_settings(backoff_base_seconds=0.05, backoff_cap_seconds=0.1)
    # Known latency: submitted 120 s ago (created_at moved back while it is queued, which
    # appends no delta), so it finishes 120 s plus the worker's time after it was made:
    # bucket 16, [100 s, 177.8 s), with 57 s of room for a slow machine (a real 2 s wait
    # left 1.16 s, and a noisy CI run once took 1.24 s).
    slow = post(api, "demo.noop", {})
    sql.execute(
        "UPDATE jobs SET created_at = created_at - interval '120 seconds' WHERE id = %s", (slow,)
    )
    handle(stack, sql, slow, {"succeeded"})
    retried = post(api, "demo.flaky", {"fail_attempts": 1}, max_attempts=3)
    handle(stack, sql, retried, {"succeeded"}, fast_retries)
    dead = post(api, "demo.flaky", {"permanent": True})
    handle(stack, sql, dead, {"dead_lettered"})

    resp = api.get("/v1/charts?window=hour")
    assert resp.status_code == 200, resp.text
    got = resp.json()
    assert got["totals"] == {"submitted": 3, "succeeded": 2, "failed": 1, "dead_lettered": 1}
    assert got["width_seconds"] == 60 and len(got["times"]) == 60
    for series, per_minute in got["counts"].items():
        assert len(per_minute) == 60 and sum(per_minute) == got["totals"][series]
        # Everything happened within the last two minutes of the window.
        assert sum(per_minute[-2:]) == got["totals"][series], series

    by_kind = {k["kind"]: k for k in got["latency"]}
    assert set(by_kind) == {None, "demo.noop", "demo.flaky"}
    noop = by_kind["demo.noop"]
    assert 120.0 <= latency_seconds(sql, slow) < 177.8
    assert charts.bucket_of(120.0) == charts.bucket_of(177.7) == 16
    assert noop["finished"] == 1 and noop["histogram"][16] == 1 and sum(noop["histogram"]) == 1
    assert 100_000 <= noop["p50_ms"] <= noop["p95_ms"] <= 177_828
    # run time (first start to finish) is the noop's few milliseconds, not its queued 120 s
    assert noop["run_p95_ms"] is not None and noop["run_p95_ms"] < 1000

    flaky = Counter(charts.bucket_of(latency_seconds(sql, j)) for j in (retried, dead))
    assert by_kind["demo.flaky"]["histogram"] == [flaky.get(b, 0) for b in range(charts.BUCKETS)]
    together = by_kind[None]
    assert together["finished"] == 3
    assert together["histogram"] == [
        noop["histogram"][b] + by_kind["demo.flaky"]["histogram"][b] for b in range(charts.BUCKETS)
    ]
    # The last minute's series carry the same percentile as the window's.
    assert noop["p50_ms"] in noop["series"]["p50_ms"][-2:]

    # The read folded what the triggers appended: every width holds the same totals, in
    # the tenant's rows and in every tenant's ('*').
    assert sql.execute("SELECT count(*) AS n FROM chart_deltas").fetchone()["n"] == 0
    widths = sql.execute(
        "SELECT width, tenant, sum(n) AS n FROM chart_buckets WHERE series = 'submitted' "
        "GROUP BY width, tenant"
    ).fetchall()
    assert {(r["width"], r["tenant"]): r["n"] for r in widths} == {
        (w, t): 3 for w in (60, 900, 3600) for t in ("acme", "*")
    }
    day = api.get("/v1/charts?window=day&kind=demo.flaky").json()
    assert day["width_seconds"] == 900 and len(day["times"]) == 96
    assert day["totals"] == {"submitted": 2, "succeeded": 1, "failed": 1, "dead_lettered": 1}
    assert [k["kind"] for k in day["latency"]] == [None, "demo.flaky"]


def test_the_database_buckets_a_duration_as_the_service_does(sql: Any) -> None:
    for seconds in (0.0, 0.005, 0.0178, 0.03, 0.5, 1.0, 1.3, 59.0, 3600.0, 86400.0, 1e6):
        row = sql.execute("SELECT chart_bucket(%s) AS b", (seconds,)).fetchone()
        assert row["b"] == charts.bucket_of(seconds), seconds
    assert charts.bucket_of(1.3) == 8 and charts.bucket_of(86400.0) == 27


def test_a_tenant_sees_only_its_own_series_and_an_admin_every_tenant_or_one(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
) -> None:
    t = tenants
    for _ in range(2):
        submit(t, t.acme)
    for _ in range(3):
        submit(t, t.globex)

    def submitted(key: str, query: str = "") -> int:
        resp = t.client.get(f"/v1/charts?window=hour{query}", headers=bearer(key))
        assert resp.status_code == 200, resp.text
        return int(resp.json()["totals"]["submitted"])

    assert submitted(t.acme) == 2
    assert submitted(t.globex) == 3
    assert submitted(t.admin) == 5
    assert submitted(t.admin, "&tenant=globex") == 3
    assert submitted(t.admin, "&tenant=initech") == 0
    refused = t.client.get("/v1/charts?tenant=globex", headers=bearer(t.acme))
    assert refused.status_code == 403 and "its own tenant" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("query", "named"),
    [("window=month", "window"), ("window=HOUR", "window"), ("kind=" + "k" * 101, "kind")],
)
def test_bad_input_is_a_422_naming_what_was_wrong(api: Any, query: str, named: str) -> None:
    resp = api.get(f"/v1/charts?{query}")
    assert resp.status_code == 422, resp.text
    assert named in str(resp.json()["detail"])


def test_retention_prunes_each_width_past_its_keep_and_keeps_the_rest(
    stack: Stack, sql: Any
) -> None:
    for width, keep in ((w.width, w.keep) for w in charts.WINDOWS.values()):
        for age, n in ((keep + 3600, 7), (keep - 3600, 5)):
            sql.execute(
                "INSERT INTO chart_buckets (width, at, tenant, kind, series, bucket, n) "
                "VALUES (%s, now() - make_interval(secs => %s), 'acme', 'demo.noop', "
                "'submitted', 0, %s)",
                (width, age, n),
            )

    async def go() -> retention.PruneReport:
        assert stack.settings.database_url is not None
        async with store.connect(stack.settings.database_url, max_size=1) as db:
            return await retention.prune(stack.with_settings(prune_batch_size=1), db)

    report = asyncio.run(go())
    assert report.chart_rows == 3
    left = sql.execute("SELECT width, n FROM chart_buckets ORDER BY width").fetchall()
    assert [(r["width"], r["n"]) for r in left] == [(60, 5), (900, 5), (3600, 5)]


def test_a_batch_counts_whole_and_only_a_move_into_an_end_or_a_failure_appends(
    api: Any, stack: Stack, sql: Any
) -> None:
    batch = api.post("/v1/jobs/batch", json={"jobs": [{"kind": "demo.noop", "payload": {}}] * 5})
    assert batch.status_code == 202, batch.text

    def appended() -> dict[str, int]:
        rows = sql.execute(
            "SELECT series, sum(n)::int AS n FROM chart_deltas GROUP BY series"
        ).fetchall()
        return {r["series"]: r["n"] for r in rows}

    assert appended() == {"submitted": 5}  # one statement, one aggregate
    job = str(batch.json()["jobs"][0]["id"])
    handle(stack, sql, job, {"succeeded"})
    # The claim, the start and the heartbeats appended nothing; the end its three rows.
    done = sum(job_row(sql, j["id"])["state"] == "succeeded" for j in batch.json()["jobs"])
    assert appended() == {"submitted": 5, "succeeded": done, "latency": done, "run": done}
