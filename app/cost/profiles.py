"""The two deployment shapes infra/ makes (Terraform's ``deployment_profile``) and what
each changes in `tasklease cost`. infra/locals.tf's ``local.profiles`` holds the same
values; tests/infra/test_cost_defaults.py fails when the two disagree.

small: the cheapest deployment the guarantees allow. No interface endpoints and no NAT
gateway: the subnets are dual-stack and the functions reach SQS, Secrets Manager and a
model provider over IPv6 through an egress-only internet gateway (no hourly charge);
Single-AZ database; the worker at 256 MB (covering make cost's measured peak per kind:
app/cost/memory.py); traces only where an upstream service asks
(tracing PassThrough); EMF metrics restricted to a fixed list, with ``outcome`` the only
dimension, so their count does not grow with kinds.

production: today's shape or stronger: interface endpoints, a Multi-AZ database, a NAT
gateway per availability zone when ``enable_nat_gateway``, every function traced by
Lambda's own rule (tracing Active), every EMF metric under every label.
"""

from __future__ import annotations

from dataclasses import dataclass

from app import errors


@dataclass(frozen=True)
class Profile:
    name: str
    interface_endpoints: bool
    ipv6_egress: bool
    nat_gateway_per_az: bool
    db_multi_az: bool
    worker_memory_mb: int
    tracing_mode: str  # Lambda's tracing_config mode
    # TASKLEASE_EMF_METRICS / TASKLEASE_EMF_DIMENSIONS (handlers/emf.py): None = all.
    emf_metrics: tuple[str, ...] | None
    emf_dimensions: tuple[str, ...] | None


SMALL_EMF_METRICS = (
    "tasklease_jobs_submitted_total",
    "tasklease_jobs_completed_total",
    "tasklease_job_run_seconds_count",
    "tasklease_job_run_seconds_sum",
    "tasklease_job_queued_to_leased_seconds_count",
    "tasklease_job_queued_to_leased_seconds_sum",
    "tasklease_model_cost_dollars_total",
)

PROFILES: dict[str, Profile] = {
    "small": Profile(
        name="small",
        interface_endpoints=False,
        ipv6_egress=True,
        nat_gateway_per_az=False,
        db_multi_az=False,
        worker_memory_mb=256,
        tracing_mode="PassThrough",
        emf_metrics=SMALL_EMF_METRICS,
        emf_dimensions=("outcome",),
    ),
    "production": Profile(
        name="production",
        interface_endpoints=True,
        ipv6_egress=False,
        nat_gateway_per_az=True,
        db_multi_az=True,
        worker_memory_mb=1024,
        tracing_mode="Active",
        emf_metrics=None,
        emf_dimensions=None,
    ),
}
DEFAULT_PROFILE = "production"  # infra/variables.tf's deployment_profile default

# The targets for the small profile (issue 36), checked and printed by `tasklease cost`.
SMALL_TARGETS = {
    "fixed_monthly_usd_at_most": 20.0,
    "support.triage_low_traffic_per_million_usd_at_most": 15.0,
    "break_even_jobs_per_month_at_most": 1_000_000,
}


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise errors.ConfigError(f"profile: one of {', '.join(PROFILES)}, got {name!r}") from None


def _parse(metric: str) -> tuple[str, str, dict[str, str]]:
    """``namespace/name[k=v,...]`` (bench/cost.py's emf_metrics) -> its parts."""
    head, _, dims = metric.partition("[")
    namespace, _, name = head.rpartition("/")
    pairs = [p.split("=", 1) for p in dims.rstrip("]").split(",") if p]
    return namespace, name, {k: v for k, v in pairs}


def custom_metrics(measured: list[str], p: Profile) -> list[str]:
    """The CloudWatch custom metrics the measured run's EMF lines make under ``p``'s
    policy: the metrics it keeps, under only the dimensions it keeps (handlers/emf.py)."""
    out = set()
    for metric in measured:
        namespace, name, dims = _parse(metric)
        if p.emf_metrics is not None and name not in p.emf_metrics:
            continue
        if p.emf_dimensions is not None:
            dims = {k: v for k, v in dims.items() if k in p.emf_dimensions}
        where = ",".join(f"{k}={v}" for k, v in sorted(dims.items()))
        out.add(f"{namespace}/{name}[{where}]")
    return sorted(out)
