"""`make plan-all`: plan the Terraform against LocalStack for every auth mode and architecture,
and each deployment_profile on both architectures.

One LocalStack (host mode; started and stopped here unless one already answers), one
`terraform init` (TF_PLUGIN_DIR: a provider mirror), tflocal's endpoint override
written once, one zip per architecture (scripts/package_lambda.py), then one saved plan
per case, `--jobs` at a time, each read back with `terraform show -json` and checked by
scripts/plan_check.py. Any failed plan or check fails the run.

Without terraform it says the plan was NOT run; that fails only under CI=true when
the hosted workflow (.github/workflows/ci.yml) does not run `make plan-all` either.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from plan_check import MODE_VARS, PROFILES, RUNTIME, Expected, Report, check_plan
from rich.console import Console
from rich.markup import escape
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
INFRA = ROOT / "infra"
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
OVERRIDE = INFRA / "localstack_providers_override.tf"
TFLOCAL_VERSION = "0.27.0"
TFLOCAL_VENV = ROOT / ".tools" / "tflocal-venv"
ARCHS = ("arm64", "x86_64")
# A step of the hosted workflow that runs the target: `run: make plan-all`, on no
# condition (`if:`), not allowed to fail (`continue-on-error`), its status not hidden.
RUNS_PLAN = re.compile(r"^make\b[^\n|;&]*\bplan-all\b[^|;&]*$")


def workflow_runs_plan(workflow: Path) -> bool:
    """Whether a job of the hosted workflow runs `make plan-all` so that it can fail."""
    try:
        jobs = yaml.safe_load(workflow.read_text()).get("jobs") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return False
    for job in jobs.values():
        if not isinstance(job, dict) or "if" in job or job.get("continue-on-error"):
            continue
        for step in job.get("steps") or []:
            if (
                isinstance(step, dict)
                and RUNS_PLAN.match(str(step.get("run", "")).strip())
                and "if" not in step
                and not step.get("continue-on-error")
            ):
                return True
    return False


@dataclass
class Case:
    mode: str
    arch: str
    profile: str = "production"
    status: str = "not run"
    plan_s: float = 0.0
    show_s: float = 0.0
    report: Report = field(default_factory=Report)

    @property
    def name(self) -> str:
        return f"{self.mode}-{self.arch}-{self.profile}"


def cases_for(modes: list[str], archs: list[str], profiles: list[str]) -> list[Case]:
    """Every mode on each architecture in production (the default profile); every other
    profile on each architecture in the first mode: the profile changes the network, the
    database and the functions' settings, not the routes."""
    cases = [Case(m, a, "production") for m in modes for a in archs if "production" in profiles]
    cases += [Case(modes[0], a, p) for p in profiles if p != "production" for a in archs]
    return cases


def exit_on_signals() -> None:
    """SIGTERM (a CI timeout, kill) and SIGHUP end the run through SystemExit, so the
    ExitStack in main still removes the endpoint override from infra/ (a later real
    `terraform plan` there would otherwise point at LocalStack) and stops LocalStack."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))


def terraform_missing(ci: bool, workflow: Path) -> tuple[int, str]:
    """The exit code and message when terraform is not installed."""
    runs = workflow.is_file() and workflow_runs_plan(workflow)
    if runs:
        shown = workflow.relative_to(ROOT) if workflow.is_relative_to(ROOT) else workflow
        return 0, f"the hosted CI workflow ({shown}, with terraform) runs `make plan-all`"
    why = (
        f"{workflow} is missing"
        if not workflow.is_file()
        else f"{workflow} does not run `make plan-all`"
    )
    if ci:
        return 1, f"{why}, so nothing plans the Terraform: CI=true makes this a failure"
    return 0, f"{why}; install terraform (infra/README.md) to plan here"


def _run(cmd: list[str], log: Path | None = None, quiet: bool = False, **kw: Any) -> int:
    """The command's exit code; its output to `log`, nowhere when quiet (stderr stays)."""
    if log is None:
        sink = subprocess.DEVNULL if quiet else None
        return subprocess.run(cmd, check=False, stdout=sink, **kw).returncode  # noqa: S603
    with log.open("w") as out:
        done = subprocess.run(cmd, check=False, stdout=out, stderr=subprocess.STDOUT, **kw)  # noqa: S603
        return done.returncode


def ensure_tflocal(uv: str) -> Path:
    """tflocal in its own venv (.tools/tflocal-venv), installed once per version."""
    stamp = TFLOCAL_VENV / f".tflocal-{TFLOCAL_VERSION}"
    if not stamp.is_file():
        shutil.rmtree(TFLOCAL_VENV, ignore_errors=True)
        py = str(TFLOCAL_VENV / "bin" / "python")
        for cmd in (
            [uv, "venv", "-q", "-p", "3.11", str(TFLOCAL_VENV)],
            [uv, "pip", "install", "-q", "--python", py, f"terraform-local=={TFLOCAL_VERSION}"],
        ):
            if _run(cmd) != 0:
                sys.exit(f"plan-all: installing tflocal failed: {' '.join(cmd)}")
        stamp.touch()
    return TFLOCAL_VENV / "bin" / "tflocal"


def start_localstack(stack: ExitStack, ci: bool) -> str | None:
    """The endpoint, starting LocalStack (and stopping it on exit) unless one answers."""
    endpoint = f"http://127.0.0.1:{os.environ.get('LOCALSTACK_PORT', '4566')}"
    script = ["bash", str(ROOT / "localstack" / "run.sh")]
    if _run([*script, "status"], quiet=True, stderr=subprocess.DEVNULL) == 0:
        print(f"plan-all: using the LocalStack at {endpoint}", flush=True)
        return endpoint
    t0 = time.monotonic()
    rc = _run([*script, "start"], quiet=True)
    if rc == 3 and not ci:
        print(
            "make plan-all: NOT RUN: Python 3.13 (needed by LocalStack) was not found; CI=true makes this a failure"
        )
        return None
    if rc != 0:
        sys.exit(f"plan-all: LocalStack did not start (localstack/run.sh start exited {rc})")
    stack.callback(_run, [*script, "stop"], quiet=True, stderr=subprocess.DEVNULL)
    print(
        f"plan-all: LocalStack started at {endpoint} in {time.monotonic() - t0:.1f} s", flush=True
    )
    return endpoint


def write_override(stack: ExitStack, tflocal: Path, terraform: str, endpoint: str) -> None:
    """tflocal's provider override (every endpoint -> LocalStack), written once for all plans."""
    if OVERRIDE.exists():
        sys.exit(
            f"plan-all: {OVERRIDE} exists (an interrupted tflocal left it?): delete it and re-run"
        )
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "TF_CMD": terraform,
        "AWS_ENDPOINT_URL": endpoint,
        "DISABLE_DEPRECATION_NOTICE": "1",
    }
    stack.callback(OVERRIDE.unlink, missing_ok=True)
    if _run([str(tflocal), "plan"], quiet=True, cwd=INFRA, env=env) != 0 or not OVERRIDE.is_file():
        sys.exit(f"plan-all: tflocal did not write {OVERRIDE}")


def package(arch: str, out_dir: Path) -> Path:
    zip_path = ROOT / "infra" / "build" / f"lambda-{arch}.zip"
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "package_lambda.py"),
        "--arch",
        arch,
        "--runtime",
        RUNTIME,
        "--out",
        str(zip_path),
        # The plans need the zip and its manifest; tests/infra/test_package.py imports
        # each architecture's handlers, so the plans do not pay for that twice.
        "--no-check",
    ]
    t0 = time.monotonic()
    if _run(cmd, log=out_dir / f"package-{arch}.log") != 0:
        raise RuntimeError(f"package {arch} failed: see {out_dir / f'package-{arch}.log'}")
    print(f"plan-all: package {arch} built in {time.monotonic() - t0:.1f} s", flush=True)
    return zip_path


def plan_case(case: Case, terraform: str, zip_path: Path, out_dir: Path) -> Case:
    plan_file, log = out_dir / f"{case.name}.tfplan", out_dir / f"{case.name}.log"
    variables = {
        "skip_requesting_account_id": "true",
        "api_auth_mode": case.mode,
        "lambda_architecture": case.arch,
        "lambda_runtime": RUNTIME,
        "lambda_package_path": str(zip_path),
        "deployment_profile": case.profile,
        **MODE_VARS[case.mode],
    }
    cmd = [
        terraform,
        f"-chdir={INFRA}",
        "plan",
        "-input=false",
        "-no-color",
        "-lock=false",
        "-var-file=terraform.tfvars.example",
    ]
    cmd += [f"-var={k}={v}" for k, v in variables.items()] + [f"-out={plan_file}"]
    t0 = time.monotonic()
    rc = _run(cmd, log=log)
    case.plan_s = time.monotonic() - t0
    if rc != 0:
        case.status = f"plan failed ({rc})"
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        case.report.problems.append(f"terraform plan exited {rc} ({log}); its last lines:")
        case.report.problems += [f"  {line}" for line in tail]
        return case
    t0 = time.monotonic()
    shown = subprocess.run(  # noqa: S603
        [terraform, f"-chdir={INFRA}", "show", "-json", str(plan_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    case.show_s = time.monotonic() - t0
    if shown.returncode != 0:
        case.status = "show failed"
        case.report.problems.append(shown.stderr.strip()[-500:])
        return case
    (out_dir / f"{case.name}.json").write_text(shown.stdout)
    case.report = check_plan(
        json.loads(shown.stdout),
        Expected(case.mode, case.arch, str(zip_path), profile=case.profile),
    )
    case.status = "check failed" if case.report.problems else "ok"
    return case


def run_cases(cases: list[Case], terraform: str, jobs: int, out_dir: Path) -> None:
    """Build each architecture's zip, then plan its cases as soon as it is there."""
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        _run_cases(pool, cases, terraform, out_dir)
    except BaseException:
        # Ctrl-C or SIGTERM: drop the queued plans and builds instead of waiting for
        # them, so the cleanup (the override file, LocalStack) runs at once.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _run_cases(pool: ThreadPoolExecutor, cases: list[Case], terraform: str, out_dir: Path) -> None:
    packages = {
        pool.submit(package, arch, out_dir): arch for arch in sorted({c.arch for c in cases})
    }
    plans: list[Future[Case]] = []
    for built in as_completed(packages):
        arch = packages[built]
        try:
            zip_path = built.result()
        except RuntimeError as exc:
            for case in (c for c in cases if c.arch == arch):
                case.status, case.report.problems = "no package", [str(exc)]
                print(f"plan-all: {case.name}: {exc}", flush=True)
            continue
        plans += [
            pool.submit(plan_case, c, terraform, zip_path, out_dir) for c in cases if c.arch == arch
        ]
    for planned in as_completed(plans):
        case = planned.result()
        print(
            f"plan-all: {case.name:<16} {case.status:<14} plan {case.plan_s:5.1f} s + show {case.show_s:4.1f} s, "
            f"{case.report.to_add} to add",
            flush=True,
        )
        for problem in case.report.problems:
            print(f"plan-all:   {case.name}: {problem}", flush=True)


def summary(cases: list[Case], wall_s: float) -> Table:
    table = Table(title=f"make plan-all: {len(cases)} plans against LocalStack in {wall_s:.0f} s")
    for column in ("api_auth_mode", "architecture", "profile", "result", "$default route"):
        table.add_column(column)
    for column in ("plan s", "show s", "to add", "functions"):
        table.add_column(column, justify="right")
    for c in cases:
        table.add_row(
            escape(c.mode),
            escape(c.arch),
            escape(c.profile),
            escape(c.status),
            escape(c.report.route_auth),
            f"{c.plan_s:.1f}",
            f"{c.show_s:.1f}",
            str(c.report.to_add),
            str(c.report.functions),
        )
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--modes", default=",".join(MODE_VARS), help="api_auth_modes to plan (default: all)"
    )
    parser.add_argument(
        "--archs", default=",".join(ARCHS), help="architectures to plan (default: both)"
    )
    parser.add_argument(
        "--profiles",
        default=",".join(PROFILES),
        help="deployment_profiles to plan (default: both; the others in the first mode)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="plans at a time (default: 2)")
    parser.add_argument("--workflow", type=Path, default=WORKFLOW, help=argparse.SUPPRESS)
    parser.add_argument(
        "--setup-tflocal", action="store_true", help="only install tflocal (`make plan`)"
    )
    args = parser.parse_args(argv)
    if args.setup_tflocal:
        ensure_tflocal(os.environ.get("UV", "uv"))
        return 0
    modes, archs = args.modes.split(","), args.archs.split(",")
    profiles = args.profiles.split(",")
    for value, allowed, what in (
        (modes, MODE_VARS, "--modes"),
        (archs, ARCHS, "--archs"),
        (profiles, PROFILES, "--profiles"),
    ):
        if bad := [v for v in value if v not in allowed]:
            parser.error(f"{what}: unknown {', '.join(bad)} (one of {', '.join(allowed)})")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    exit_on_signals()
    ci = os.environ.get("CI", "") == "true"
    terraform = os.environ.get("TERRAFORM") or shutil.which("terraform")
    if not terraform:
        rc, why = terraform_missing(ci, args.workflow)
        print(
            "=" * 72 + f"\nmake plan-all: NOT RUN: terraform is not installed; {why}\n" + "=" * 72
        )
        return rc
    os.environ.setdefault("CHECKPOINT_DISABLE", "1")
    t0 = time.monotonic()
    out_dir = INFRA / "build" / "plans"
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = cases_for(modes, archs, profiles)
    tflocal = ensure_tflocal(os.environ.get("UV", "uv"))
    with ExitStack() as stack:
        endpoint = start_localstack(stack, ci)
        if endpoint is None:
            return 0
        init = [terraform, f"-chdir={INFRA}", "init", "-backend=false", "-input=false"]
        if plugin_dir := os.environ.get("TF_PLUGIN_DIR"):
            init.append(f"-plugin-dir={plugin_dir}")
        if _run(init, log=out_dir / "init.log") != 0:
            sys.exit(f"plan-all: terraform init failed: see {out_dir / 'init.log'}")
        write_override(stack, tflocal, terraform, endpoint)
        run_cases(cases, terraform, args.jobs, out_dir)
    Console(width=120).print(summary(cases, time.monotonic() - t0))
    failed = [c.name for c in cases if c.status != "ok"]
    if failed:
        print(f"make plan-all: FAILED: {', '.join(failed)} (logs and plans in {out_dir})")
        return 1
    print(f"make plan-all: {len(cases)} plans ok in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
