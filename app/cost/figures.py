"""`make cost`'s measured figures (bench/results/cost.json), checked before anything is
priced: a pydantic model of the file, so a missing run, a count that is not a count, zero
jobs or invocations, an empty ``kinds``, a kind without the worker's measured peak
memory, a low-traffic run whose worker calls are not one
per job, a metric listed twice or no ``measured_at`` is an error naming the field rather
than a traceback or a wrong price."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app import errors
from app.cost.prices import read_json

FIGURES_VERSION = 2

Count = Annotated[int, Field(ge=0, le=10**12)]
# Lambda's longest invocation is 15 minutes.
Ms = Annotated[float, Field(ge=0, le=900_000)]
Size = Annotated[float, Field(ge=0, le=10**9)]


class _Doc(BaseModel):
    # strict: JSON numbers only (no "12" strings, no booleans); extra fields are kept
    # (the file carries means, p50s and notes the pricing does not read).
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="allow")


class Sqs(_Doc):
    calls: dict[str, Count]


class Function(_Doc):
    # A run's jobs pass through the API and the worker at least once (and the idle
    # sweeper's figure is of at least one pass): zero would price nothing as something.
    invocations: Annotated[int, Field(gt=0, le=10**9)]
    billed_mean_ms: Ms
    sqs: Sqs
    pg_round_trips: Count
    log_bytes: Count


class Worker(Function):
    event_source: dict[str, Count]


class Run(_Doc):
    jobs: Annotated[int, Field(gt=0, le=10**9)]
    api: Function
    worker: Worker


class WorkerMemory(_Doc):
    # bench/cost_memory.py: the peak resident memory of a fresh worker process running
    # this kind's jobs. Not zero (a process has memory), not above Lambda's largest.
    jobs: Annotated[int, Field(gt=0, le=10**9)]
    peak_rss_mb: Annotated[float, Field(gt=0, le=10240)]


class Kind(_Doc):
    model_calls_per_job: Annotated[int, Field(ge=0, le=100)]
    effects_per_job: Annotated[int, Field(ge=0, le=100)]
    payload_bytes: Size
    result_bytes: Size
    effect_results_bytes: Size
    single: Run
    batch: Run
    one_per_invocation: Run
    worker_memory: WorkerMemory


class Figures(_Doc):
    figures_version: Literal[2]
    measured_at: Annotated[str, Field(min_length=1)]
    notes: list[str] = []
    kinds: Annotated[dict[str, Kind], Field(min_length=1)]
    sweeper_idle: Function
    # Each distinct metric name + dimension values of the EMF lines the run wrote: one
    # CloudWatch custom metric each.
    emf_metrics: list[str]


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(the file)"


def parse_figures(doc: Any, path: str) -> dict[str, Any]:
    """The figures as a plain dict, or a ConfigError naming the first bad field."""
    if not isinstance(doc, dict) or doc.get("figures_version") != FIGURES_VERSION:
        version = doc.get("figures_version") if isinstance(doc, dict) else None
        raise errors.ConfigError(
            f"{path}: not a `make cost` figures file of figures_version {FIGURES_VERSION} "
            f"(got {version!r}): run `make cost` again"
        )
    try:
        figures = Figures.model_validate(doc).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        raise errors.ConfigError(
            f"{path}: {_where(first['loc'])}: {first['msg']} (got {_got(first.get('input'))})"
        ) from exc
    _check_consistent(figures, path)
    return figures


def _got(v: Any) -> str:
    got = repr(v)
    return got if len(got) <= 60 else got[:57] + "..."


def _check_consistent(figures: dict[str, Any], path: str) -> None:
    """What each field allows alone but the figures cannot hold together."""
    for kind, fig in figures["kinds"].items():
        one = fig["one_per_invocation"]
        if one["worker"]["invocations"] != one["jobs"]:
            raise errors.ConfigError(
                f"{path}: kinds.{kind}.one_per_invocation.worker.invocations: one job per "
                f"worker call means as many calls as jobs ({one['jobs']}) "
                f"(got {one['worker']['invocations']})"
            )
    seen: set[str] = set()
    for i, metric in enumerate(figures["emf_metrics"]):
        if metric in seen:
            raise errors.ConfigError(
                f"{path}: emf_metrics.{i}: each metric is listed once, and this one "
                f"already was (got {_got(metric)})"
            )
        seen.add(metric)


def load_figures(path: Path) -> dict[str, Any]:
    doc = read_json(path, "figures file", ": `make cost` measures and writes it")
    return parse_figures(doc, str(path))
