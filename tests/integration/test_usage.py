"""Model usage and cost: a job's tokens and estimated cost (GET /v1/jobs/{id}), a
tenant's totals by kind, day and model (GET /v1/usage), tenant isolation, bad days 422;
and the effect row that carries them (migration 0012)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from app.demos.triage.writing import fake_text
from tests.conftest import Stack, bearer, run
from tests.integration.test_api_waits import drain, submit

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

PROMPT = "Say something about queues"


def written(stack: Stack, api: Any, sql: Any, words: int, **headers: str) -> str:
    job = submit(
        api, {"kind": "demo.write", "payload": {"prompt": PROMPT, "words": words}}, **headers
    )
    run(drain(stack, sql, [job["id"]]))
    return str(job["id"])


def test_a_streamed_answer_s_usage_and_cost_show_on_the_job_and_in_the_totals(
    stack: Stack, api: Any, sql: Any
) -> None:
    job_id = written(stack, api, sql, words=10)
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["state"] == "succeeded" and job["result"]["text"] == fake_text(PROMPT, 10)
    # The fake counts words: 4 in the prompt, 10 in the answer; $0.1 / $0.4 per 1M.
    assert job["usage"] == {
        "input_tokens": 4,
        "output_tokens": 10,
        "cost_usd": round((4 * 0.1 + 10 * 0.4) / 1e6, 8),
        "models": [
            {
                "model": "fake-writer-1",
                "calls": 1,
                "input_tokens": 4,
                "output_tokens": 10,
                "cost_usd": round((4 * 0.1 + 10 * 0.4) / 1e6, 8),
            }
        ],
    }
    row = sql.execute(
        "SELECT model, input_tokens, output_tokens FROM effects WHERE job_id = %s", (job_id,)
    ).fetchone()
    assert row == {"model": "fake-writer-1", "input_tokens": 4, "output_tokens": 10}

    written(stack, api, sql, words=5)
    today = dt.datetime.now(dt.UTC).date().isoformat()
    usage = api.get("/v1/usage").json()
    assert usage["rows"] == [
        {
            "tenant": "acme",
            "kind": "demo.write",
            "day": today,
            "model": "fake-writer-1",
            "calls": 2,
            "input_tokens": 8,
            "output_tokens": 15,
            "cost_usd": round((8 * 0.1 + 15 * 0.4) / 1e6, 8),
        }
    ]
    assert (usage["input_tokens"], usage["output_tokens"], usage["until"]) == (8, 15, today)


def test_a_job_without_model_calls_has_zero_usage(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.sleep", "payload": {"steps": 1}})
    run(drain(stack, sql, [job["id"]]))
    usage = api.get(f"/v1/jobs/{job['id']}").json()["usage"]
    assert usage == {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0, "models": []}


def test_a_tenant_sees_only_its_own_usage_and_an_admin_every_tenant(
    stack: Stack, api: Any, sql: Any
) -> None:
    written(stack, api, sql, words=3)
    other = bearer(stack.key("globex"))
    written(stack, api, sql, words=7, **other)
    mine = api.get("/v1/usage").json()["rows"]
    theirs = api.get("/v1/usage", headers=other).json()["rows"]
    assert [(r["tenant"], r["output_tokens"]) for r in mine] == [("acme", 3)]
    assert [(r["tenant"], r["output_tokens"]) for r in theirs] == [("globex", 7)]
    assert api.get("/v1/usage", params={"tenant": "globex"}).status_code == 403
    admin = bearer(stack.key("ops", admin=True))
    every = api.get("/v1/usage", headers=admin).json()["rows"]
    assert sorted(r["tenant"] for r in every) == ["acme", "globex"]
    one = api.get("/v1/usage", params={"tenant": "globex"}, headers=admin).json()["rows"]
    assert [r["tenant"] for r in one] == ["globex"]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"since": "2026-02-01", "until": "2026-01-01"}, "since"),
        ({"since": "2020-01-01", "until": "2026-01-01"}, "since"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"until": "0001-01-01"}, "until"),
        ({"tenant": "not a tenant!"}, "tenant"),
    ],
)
def test_bad_usage_parameters_are_422_naming_the_parameter(
    api: Any, params: dict[str, str], named: str
) -> None:
    resp = api.get("/v1/usage", params=params)
    assert resp.status_code == 422, resp.text
    assert named in resp.text
