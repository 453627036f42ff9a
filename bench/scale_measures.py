"""The scale phase's measures (bench/scale.py), each taken the same way on the small and
the large database: HTTP timings from the bench's clients, statement counts and mean
times from pg_stat_statements."""

from __future__ import annotations

import asyncio
import difflib
import re
import statistics
import time
from typing import Any

import httpx
import psycopg

from app.store import sql
from bench import measure, scale_plans
from bench.stack import BenchStack

REPEAT = 15  # timed requests per page measure (the median is reported)
DEEP_PAGES = 50
WORKER_STATEMENTS = ("claim_batch", "start_batch", "succeed_batch")


def _norm(text: str) -> str:
    """A statement's skeleton, the same for our text and pg_stat_statements' (which
    replaces constants by $n and folds IN lists): comments, literals and parameters
    dropped."""
    text = re.sub(r"--[^\n]*|/\*.*?\*/", "", text)
    text = re.sub(r"'(?:[^']|'')*'|%\(\w+\)s|\$\d+|\b\d+(?:\.\d+)?\b", "?", text)
    text = re.sub(r"\?(?:\s*,\s*\?)+", "?", text)
    return " ".join(text.split()).rstrip(";").rstrip()


NAMES = {_norm(body): name for name, body in sql.queries.items()}


def name_of(text: str) -> str | None:
    """Our query's name for a pg_stat_statements text (the closest skeleton)."""
    norm = _norm(text)
    if norm in NAMES:
        return NAMES[norm]
    best = difflib.get_close_matches(norm, list(NAMES), n=1, cutoff=0.9)
    return NAMES[best[0]] if best else None


def statements(url: str) -> dict[str, dict[str, float]]:
    """pg_stat_statements by query name: calls and mean execution time (ms)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, calls, mean_exec_time FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid AND d.datname = current_database()"
        ).fetchall()
    found: dict[str, dict[str, float]] = {}
    for text, calls, mean in rows:
        name = name_of(text)
        if name:
            was = found.get(name, {"calls": 0, "mean_ms": 0.0})
            n = was["calls"] + int(calls)
            mean_ms = (was["calls"] * was["mean_ms"] + int(calls) * float(mean)) / n
            found[name] = {"calls": n, "mean_ms": mean_ms}
    return found


def reset_statements(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


class Measures:
    def __init__(self, stack: BenchStack, keys: dict[str, str], label: str) -> None:
        self.stack = stack
        self.keys = keys
        self.label = label

    def client(self, who: str, clients: int = 1) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        return httpx.AsyncClient(
            base_url=self.stack.api_url,
            timeout=30,
            limits=limits,
            headers={"Authorization": f"Bearer {self.keys[who]}"},
        )

    async def submit_and_run(self, n: int, clients: int) -> dict[str, Any]:
        """n demo.noop jobs through POST /v1/jobs (timed), run to the end by the workers;
        the statements of their submission and claim-to-complete."""
        url = self.stack.database_url
        reset_statements(url)
        took: list[float] = []
        ids: list[str] = []
        with measure.progress() as bar:
            task = bar.add_task(f"{self.label}: POST /v1/jobs", total=n, rate="")
            async with self.client("tenant", clients) as http:

                async def one(_: int) -> None:
                    t = time.perf_counter()
                    r = await http.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}})
                    took.append((time.perf_counter() - t) * 1000)
                    r.raise_for_status()
                    ids.append(r.json()["id"])
                    bar.advance(task)

                await measure.run_pool(n, clients, one)
            done = bar.add_task(f"{self.label}: run to the end", total=n, rate="")
            with psycopg.connect(url, autocommit=True) as conn:
                deadline = time.monotonic() + 300
                while True:
                    row = conn.execute(
                        "SELECT count(*) FROM jobs WHERE id = ANY(%s::uuid[]) AND state = 'succeeded'",
                        (ids,),
                    ).fetchone()
                    finished = int(row[0]) if row else 0
                    bar.update(done, completed=finished)
                    if finished >= n:
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{self.label}: {finished}/{n} jobs done in 300 s")
                    await asyncio.sleep(0.25)
        await asyncio.sleep(0.5)
        st = statements(url)
        took.sort()
        work = {k: st[k] for k in WORKER_STATEMENTS if k in st}
        calls = sum(v["calls"] for v in work.values())
        mean = sum(v["calls"] * v["mean_ms"] for v in work.values()) / calls if calls else None
        return {
            "submit POST /v1/jobs": {
                "p50_ms": took[len(took) // 2],
                "p95_ms": took[int(len(took) * 0.95)],
            },
            "submit statement insert_jobs (admission checks)": {
                "mean_ms": st.get("insert_jobs", {}).get("mean_ms")
            },
            "claim-to-complete statements": {"per_job": calls / n, "mean_ms": mean},
            "statements": st,
        }

    async def _timed(
        self, who: str, path: str, params: dict[str, Any], statement: str
    ) -> dict[str, Any]:
        """The median of REPEAT requests over HTTP, and the mean execution time of the
        statement that serves them (pg_stat_statements, reset before)."""
        reset_statements(self.stack.database_url)
        async with self.client(who) as http:
            took = []
            for _ in range(REPEAT):
                t = time.perf_counter()
                r = await http.get(path, params=params)
                took.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
        st = statements(self.stack.database_url).get(statement, {})
        return {"ms": statistics.median(took), "db_ms": st.get("mean_ms")}

    async def _deep_cursor(self, who: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The params of the page DEEP_PAGES down (or the last), following next_cursor."""
        async with self.client(who) as http:
            page = dict(params)
            depth = 1
            while depth < DEEP_PAGES:
                r = await http.get("/v1/jobs", params=page)
                r.raise_for_status()
                cursor = r.json().get("next_cursor")
                if not cursor:
                    break
                page = {**params, "cursor": cursor}
                depth += 1
        return page, depth

    async def pages(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        cases = [
            ("GET /v1/jobs tenant, first page", "tenant", {}),
            ("GET /v1/jobs tenant, state=cancelled", "tenant", {"state": "cancelled"}),
            ("GET /v1/jobs tenant, state=dead_lettered", "tenant", {"state": "dead_lettered"}),
            ("GET /v1/jobs all tenants (admin), first page", "admin", {}),
            ("GET /v1/jobs all tenants, state=dead_lettered", "admin", {"state": "dead_lettered"}),
        ]
        with measure.progress() as bar:
            task = bar.add_task(f"{self.label}: pages", total=len(cases) + 4, rate="")
            for name, who, params in cases:
                found[name] = await self._timed(who, "/v1/jobs", params, "list_jobs")
                bar.advance(task)
            for name, who in (("tenant", "tenant"), ("all tenants", "admin")):
                page, depth = await self._deep_cursor(who, {})
                found[f"GET /v1/jobs {name}, deep cursor"] = {
                    **await self._timed(who, "/v1/jobs", page, "list_jobs"),
                    "depth_pages": depth,
                }
                bar.advance(task)
            for name, who in (("tenant", "tenant"), ("all tenants", "admin")):
                found[f"GET /v1/dead-letters {name}"] = await self._timed(
                    who, "/v1/dead-letters", {}, "dead_letters"
                )
                bar.advance(task)
        return found

    async def search(self, tenant: str) -> dict[str, Any]:
        """GET /v1/jobs searches (issue 33): by a payload field, and by an id prefix, as a
        tenant and across tenants, for a job halfway down the tenant's history."""
        with psycopg.connect(self.stack.database_url, autocommit=True) as conn:
            s = scale_plans.sample(conn, tenant)
        prefix = str(s["job_id"])[:8]
        cases = [
            ("tenant", "payload field", {"payload.text": s["text"]}),
            ("admin", "payload field, all tenants", {"payload_json.n": str(s["n"])}),
            ("tenant", "id prefix", {"id": prefix}),
            ("admin", "id prefix, all tenants", {"id": prefix}),
        ]
        found: dict[str, Any] = {}
        with measure.progress() as bar:
            task = bar.add_task(f"{self.label}: search", total=len(cases), rate="")
            for who, name, params in cases:
                found[f"GET /v1/jobs search by {name}"] = await self._timed(
                    who, "/v1/jobs", params, "search_jobs"
                )
                bar.advance(task)
        return found

    async def counts(self) -> dict[str, Any]:
        """GET /metrics (its gauges are read at most once a second: one request a 1.1 s),
        the web view's GET /v1/overview, GET /v1/kinds (counts by kind) and GET /v1/workers."""
        found: dict[str, Any] = {}
        reset_statements(self.stack.database_url)
        async with self.client("admin") as http:
            took = []
            for _ in range(5):
                await asyncio.sleep(1.1)
                t = time.perf_counter()
                (await http.get("/metrics")).raise_for_status()
                took.append((time.perf_counter() - t) * 1000)
        st = statements(self.stack.database_url).get("gauges_jobs_by_state_and_kind", {})
        found["GET /metrics"] = {"ms": statistics.median(took), "db_ms": st.get("mean_ms")}
        found["GET /v1/overview tenant"] = await self._timed(
            "tenant", "/v1/overview", {}, "overview"
        )
        found["GET /v1/overview all tenants"] = await self._timed(
            "admin", "/v1/overview", {}, "overview"
        )
        # The kinds page (counts by kind and state) and the workers page (admin only).
        found["GET /v1/kinds tenant"] = await self._timed(
            "tenant", "/v1/kinds", {}, "counts_by_kind"
        )
        found["GET /v1/kinds all tenants"] = await self._timed(
            "admin", "/v1/kinds", {}, "counts_by_kind"
        )
        found["GET /v1/workers"] = await self._timed("admin", "/v1/workers", {}, "list_workers")
        return found

    async def charts(self) -> dict[str, Any]:
        """The web view's charts, GET /v1/charts: each window for the big tenant, the
        week for every tenant (an admin), from the buckets migration 0027 keeps."""
        found: dict[str, Any] = {}
        cases = [(f"{w}, tenant", "tenant", w) for w in ("hour", "day", "week")]
        cases.append(("week, all tenants", "admin", "week"))
        for name, who, window in cases:
            found[f"GET /v1/charts {name}"] = await self._timed(
                who, "/v1/charts", {"window": window}, "chart_rows"
            )
        return found
