"""The job-kind API: ``@kind``, the registry and TASKLEASE_KINDS, typed deps built once
and closed, JobContext's effects, and the in-memory runner (tasklease.testing)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from app import errors
from app.kinds import JobContext, Kind, PermanentError, Registry, Retry, kind
from app.kinds.deps import Deps
from app.kinds.memory_store import EffectStore
from app.kinds.testing import run_kind
from app.settings import config
from tests.conftest import ROOT

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(config.PREFIX):
            monkeypatch.delenv(name)


class Echo(BaseModel):
    text: str


class Echoed(BaseModel):
    text: str
    attempt: int


@kind("test.echo", timeout_seconds=30, max_attempts=3)
async def echo(ctx: JobContext[None], p: Echo) -> Echoed:
    """Echo the text back."""
    return Echoed(text=p.text, attempt=ctx.attempt)


# --- @kind ------------------------------------------------------------------------


def test_kind_reads_the_payload_model_result_and_description_off_the_function() -> None:
    assert isinstance(echo, Kind)
    assert (echo.name, echo.payload, echo.description) == ("test.echo", Echo, "Echo the text back.")
    assert (echo.timeout_seconds, echo.max_attempts, echo.deps) == (30, 3, None)
    assert echo.parse({"text": "hi"}) == Echo(text="hi")
    run = asyncio.run(run_kind(echo, {"text": "hi"}))
    assert run.result == Echoed(text="hi", attempt=1)
    assert run.stored == {"text": "hi", "attempt": 1}


def test_a_kind_without_a_payload_model_or_result_annotation_is_a_config_error() -> None:
    async def no_model(ctx: JobContext[None], p: dict[str, Any]) -> int:
        return 1

    async def no_result(ctx: JobContext[None], p: Echo):  # type: ignore[no-untyped-def]
        return 1

    def not_async(ctx: JobContext[None], p: Echo) -> int:
        return 1

    with pytest.raises(errors.ConfigError, match=r"'bad.model'.*pydantic model"):
        kind("bad.model")(no_model)  # type: ignore[type-var]
    with pytest.raises(errors.ConfigError, match=r"'bad.result'.*return annotation"):
        kind("bad.result")(no_result)
    with pytest.raises(errors.ConfigError, match=r"'bad.sync'.*async def"):
        kind("bad.sync")(not_async)  # type: ignore[arg-type]


def test_a_result_that_is_not_the_declared_type_is_a_permanent_error() -> None:
    @kind("test.liar")
    async def liar(ctx: JobContext[None], p: Echo) -> Echoed:
        return {"text": p.text}  # type: ignore[return-value]

    with pytest.raises(PermanentError, match=r"'test.liar'.*declared result"):
        asyncio.run(run_kind(liar, {"text": "x"}))


def test_retry_and_permanent_error_are_the_engine_s_own_classes() -> None:
    assert Retry is errors.Retry
    assert PermanentError is errors.PermanentError
    assert Retry(delay=3).delay == 3


# --- the registry and TASKLEASE_KINDS ------------------------------------------------


def write_module(root: Path, name: str, body: str) -> None:
    (root / f"{name}.py").write_text(textwrap.dedent(body))


ECHO_MODULE = """
    from pydantic import BaseModel
    from app.kinds import JobContext, kind

    class P(BaseModel):
        n: int

    @kind("{name}")
    async def run(ctx: JobContext[None], p: P) -> int:
        return p.n
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_kinds_are_found_in_the_modules_tasklease_kinds_names(
    modules: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_module(modules, "kinds_one", ECHO_MODULE.format(name="user.one"))
    write_module(modules, "kinds_two", ECHO_MODULE.format(name="user.two"))
    # A module that imports another's kind defines no second one.
    write_module(modules, "kinds_again", "from kinds_one import run\n")
    monkeypatch.setenv("TASKLEASE_KINDS", " kinds_one, kinds_two,kinds_again,")
    assert config.load().kind_modules == ("kinds_one", "kinds_two", "kinds_again")
    registry = Registry()
    # Those modules' kinds and no others: the demos are not built in.
    assert set(registry) == {"user.one", "user.two"}
    assert registry.get_kind("user.two").parse({"n": 2}).n == 2


def test_a_kinds_module_that_does_not_import_stops_start_up_naming_it(modules: Path) -> None:
    write_module(modules, "kinds_broken", "raise RuntimeError('boom')\n")
    with pytest.raises(errors.ConfigError, match=r"'kinds_broken' does not import.*boom"):
        Registry().load(["kinds_broken"])
    with pytest.raises(errors.ConfigError, match="'kinds_nowhere' does not import"):
        Registry().load(["kinds_nowhere"])


def test_a_kind_name_defined_twice_stops_start_up_naming_it_and_both_modules(
    modules: Path,
) -> None:
    write_module(modules, "kinds_a", ECHO_MODULE.format(name="user.same"))
    write_module(modules, "kinds_b", ECHO_MODULE.format(name="user.same"))
    with pytest.raises(
        errors.ConfigError, match=r"'user.same' is registered twice.*kinds_a.*kinds_b"
    ):
        Registry().load(["kinds_a", "kinds_b"])


def test_a_kinds_module_without_a_kind_is_a_config_error(modules: Path) -> None:
    write_module(modules, "kinds_empty", "X = 1\n")
    with pytest.raises(errors.ConfigError, match="'kinds_empty' defines no job kind"):
        Registry().load(["kinds_empty"])


def test_a_user_kind_may_not_take_a_demo_kinds_name_when_both_are_named(modules: Path) -> None:
    write_module(modules, "kinds_demo_clash", ECHO_MODULE.format(name="demo.noop"))
    with pytest.raises(errors.ConfigError, match=r"'demo.noop' is registered twice.*app.demos"):
        Registry().load(["app.demos", "kinds_demo_clash"])


def test_importing_the_kinds_api_imports_no_kind() -> None:
    """The registry imports its kinds, never the other way round: no import cycle."""
    code = (
        "import sys, app.kinds\n"
        "assert not [m for m in sys.modules if m.startswith('app.demos')]\n"
        "app.kinds.REGISTRY.load(['app.demos'])\n"
        "assert 'demo.sleep' in app.kinds.REGISTRY\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={**os.environ})


def test_without_tasklease_kinds_a_process_has_no_kinds_and_says_so() -> None:
    """No built-in kinds: a deployment that names none has none, logs so at start-up, and
    refuses a submission naming the variable."""
    code = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from app import errors, kinds\n"
        "from app.settings import config\n"
        "kinds.load(config.load())\n"
        "print('kinds:', len(kinds.REGISTRY))\n"
        "try:\n"
        "    kinds.get('demo.noop')\n"
        "except errors.BadRequest as exc:\n"
        "    print('refused:', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLEASE_")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert "kinds: 0" in done.stdout
    assert "no job kinds: TASKLEASE_KINDS is empty" in done.stderr
    assert "refused: unknown job kind 'demo.noop'" in done.stdout
    assert "TASKLEASE_KINDS" in done.stdout.split("refused:")[1]


# --- deps ---------------------------------------------------------------------------


class Client:
    def __init__(self) -> None:
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


BUILT: list[Client] = []


async def build_client(settings: config.Settings) -> Client:
    BUILT.append(Client())
    return BUILT[-1]


@kind("test.uses_client", deps=build_client)
async def uses_client(ctx: JobContext[Client], p: Echo) -> bool:
    return ctx.deps.closed


@kind("test.shares_client", deps=build_client)
async def shares_client(ctx: JobContext[Client], p: Echo) -> bool:
    return ctx.deps.closed


@pytest.mark.asyncio
async def test_deps_are_built_once_per_factory_and_closed_together() -> None:
    BUILT.clear()
    deps = Deps(config.load())
    await deps.open([uses_client, shares_client, echo])
    first, second, none = (
        await deps.get(uses_client),
        await deps.get(shares_client),
        await deps.get(echo),
    )
    await deps.aclose()
    assert first is second is BUILT[0]
    assert len(BUILT) == 1
    assert none is None
    assert BUILT[0].closed


def test_run_kind_builds_the_kind_s_deps_when_none_are_given_and_closes_them() -> None:
    BUILT.clear()
    run = asyncio.run(run_kind(uses_client, {"text": "x"}))
    assert run.result is False
    assert BUILT[0].closed


# --- effects ------------------------------------------------------------------------


class Steps(BaseModel):
    n: int


CALLS: list[str] = []


@kind("test.steps")
async def steps(ctx: JobContext[None], p: Steps) -> list[int]:
    out = []
    for i in range(p.n):

        async def call(i: int = i) -> int:
            CALLS.append(f"s{i}")
            return i * 10

        out.append(await ctx.effect(f"s{i}", call))
    return out


def test_a_crash_after_effect_n_replays_the_first_n_and_runs_the_rest_once() -> None:
    CALLS.clear()
    store = EffectStore()
    run = asyncio.run(run_kind(steps, {"n": 3}, crash_after_effect=2, store=store))
    assert run.result == [0, 10, 20]
    assert (run.crashed_after, run.attempts) == ("s1", 2)
    assert run.replayed == ["s0", "s1"]
    assert run.ran == CALLS == ["s0", "s1", "s2"]
    assert store.records == {"s0": 0, "s1": 10, "s2": 20}


def test_an_effect_recorded_by_another_attempt_first_is_the_one_returned() -> None:
    class Racer(JobContext[None]):
        async def _record(
            self, key: str, seq: int, value: Any, usage: Any = None, *, shape: str
        ) -> Any:
            return "theirs"

    ctx = Racer(job_id=uuid.uuid4(), kind="k", attempt=1, deps=None)

    async def mine() -> str:
        return "mine"

    assert asyncio.run(ctx.effect("x", mine)) == "theirs"


def test_an_effect_key_out_of_range_or_a_result_that_is_not_json_is_permanent() -> None:
    @kind("test.bad_effects")
    async def bad(ctx: JobContext[None], p: Echo) -> int:
        async def value() -> Any:
            return {1, 2} if p.text == "set" else 1

        return await ctx.effect("k" * 201 if p.text == "long" else "k", value)

    with pytest.raises(PermanentError, match="1 to 200 characters"):
        asyncio.run(run_kind(bad, {"text": "long"}))
    with pytest.raises(PermanentError, match="not JSON"):
        asyncio.run(run_kind(bad, {"text": "set"}))


def test_the_job_logger_binds_the_job_s_fields(caplog: pytest.LogCaptureFixture) -> None:
    @kind("test.logs")
    async def logs(ctx: JobContext[None], p: Echo) -> None:
        ctx.log.info("hello", extra={"effect": "e1"})

    caplog.set_level(logging.INFO)
    asyncio.run(run_kind(logs, {"text": "x"}, attempt=3))
    [record] = [r for r in caplog.records if r.getMessage() == "hello"]
    assert record.name == "app.kinds.test.logs"
    assert (record.kind, record.attempt, record.effect) == ("test.logs", 3, "e1")  # type: ignore[attr-defined]
    assert record.job_id  # type: ignore[attr-defined]
