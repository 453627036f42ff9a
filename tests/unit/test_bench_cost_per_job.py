"""make bench's cost per job beside the peers' and issue 37's targets (bench/cost_per_job.py),
from fixed figures; and the process-tree CPU it is measured with (bench/cpu_meter.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from rich.console import Console

from bench import cost_per_job
from bench.cpu_meter import SELF, CpuMeter, tree_cpu_s


def cost(producer: float, workers: float, pg: float, pg_cpu: float, sqs: float) -> dict[str, Any]:
    return {
        "producer_cpu_ms": producer,
        "workers_cpu_ms": workers,
        "pg_exec_ms": pg,
        "pg_server_cpu_ms": pg_cpu,
        "broker_server_cpu_ms": sqs,
        "proxy_cpu_ms": 0.5,
    }


def sqs(total: float, empty: float = 0.0) -> dict[str, Any]:
    by_action = {"SendMessage": 1.0, "ReceiveMessage(empty)": empty}
    return {"sqs_requests_per_job": {"by_action": by_action, "total": total}}


def results(**over: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "tasklease": {"jobs_per_s": 170.0, "cost_per_job": cost(1.5, 2.0, 0.9, 1.2, 0.8)}
        | sqs(3.2, 0.25),
        "tasklease_batch_submit": {
            "jobs_per_s": 600.0,
            "cost_per_job": cost(0.4, 1.9, 0.5, 0.7, 0.3),
        }
        | sqs(0.5),
        "celery": {"skipped": "--no-celery", "jobs_per_s": None},
        "celery_recommended": {
            "jobs_per_s": 170.0,
            "cost_per_job": cost(0.3, 1.1, 0.0, 0.0, 0.6),
        }
        | sqs(0.4),
        "procrastinate": {
            "jobs_per_s": 600.0,
            "cost_per_job": cost(0.2, 0.6, 0.4, 1.0, 0.0)
            | {"broker_requests": 0, "note": "its queue is PostgreSQL"},
        },
        "broker_limit": {"msgs_per_s": 750.0},
        "ratio_to_broker_batch_submit": 0.8,
        "single_submission_floor": {"ratio": 0.6},
        "noisy_neighbour": {
            "tenants": {"p95_ratio": 2.0, "jobs": 50, "started": {"idle": 50, "busy": 50}}
        },
        "kill_run": {"not_succeeded": 0, "completed_twice": 0, "effects_not_once": 0},
    }
    return r | over


def test_each_system_gets_one_row_with_its_cost_and_a_total_of_the_processes() -> None:
    rows = cost_per_job.table_figures(results())
    assert list(rows) == [key for key, _ in cost_per_job.SYSTEMS]
    one = rows["tasklease"]
    assert one["system"] == "tasklease, 1 job/request"
    assert (one["jobs_per_s"], one["producer_cpu_ms"], one["workers_cpu_ms"]) == (170.0, 1.5, 2.0)
    # Broker requests from the proxy's counts, empty receives apart; the proxy (the
    # benchmark's own) is not in the total: API + workers + PG server + SQS server.
    assert (one["broker_requests"], one["empty_receives"]) == (3.2, 0.25)
    assert one["total_cpu_ms"] == 1.5 + 2.0 + 1.2 + 0.8
    # Its own processes: the total less the SQS server; procrastinate has none.
    assert one["own_cpu_ms"] == 1.5 + 2.0 + 1.2
    assert rows["procrastinate"]["own_cpu_ms"] == rows["procrastinate"]["total_cpu_ms"] == 1.8
    assert rows["celery"] == {"system": "celery strict", "skipped": True}
    assert rows["procrastinate"]["broker_requests"] == 0  # its own figure, not the counts'


def test_a_missing_figure_leaves_the_total_unknown_rather_than_too_small() -> None:
    r = results()
    r["tasklease"]["cost_per_job"]["broker_server_cpu_ms"] = None  # e.g. no local server
    assert cost_per_job.table_figures(r)["tasklease"]["total_cpu_ms"] is None
    r["tasklease"]["cost_per_job"]["workers_cpu_ms"] = None
    assert cost_per_job.table_figures(r)["tasklease"]["own_cpu_ms"] is None


def test_the_table_renders_each_row_in_markdown_and_in_the_terminal() -> None:
    r = results()
    r["cost_per_job"] = cost_per_job.table_figures(r)
    md = cost_per_job.markdown(r)
    header = next(line for line in md if line.startswith("| system"))
    assert header.count("|") == len(cost_per_job.COLUMNS) + 2
    row = next(line for line in md if line.startswith("| tasklease, 1 job/request"))
    assert (
        row
        == "| tasklease, 1 job/request | 170 | 1.5 | 2 | 0.9 | 1.2 | 3.2 | 0.25 | 0.8 | 5.5 | 4.7 |"
    )
    assert "| celery strict | not run |" in "\n".join(md)
    assert "- procrastinate: its queue is PostgreSQL" in md
    # The terminal's table: a column per system, every figure inside 80 characters.
    console = Console(record=True, width=80)
    table = cost_per_job.rich_table(r)
    assert table is not None
    console.print(table)
    lines = console.export_text().splitlines()
    total = next(line for line in lines if line.strip().startswith("total CPU"))
    assert total.split()[-4:] == ["5.5", "3.3", "2", "1.8"]  # celery strict's: blank
    own = next(line for line in lines if line.strip().startswith("total less"))
    assert own.split()[-4:] == ["4.7", "3", "1.4", "1.8"]
    assert "tinate" in next(line for line in lines if line.strip().startswith("per job"))
    assert any("not run" in line for line in lines)
    assert cost_per_job.markdown({}) == [] and cost_per_job.rich_table({}) is None


def verdicts(r: dict[str, Any]) -> dict[str, bool | None]:
    return {t["key"]: t["met"] for t in cost_per_job.targets(r)}


def test_targets_at_their_bounds_are_met() -> None:
    assert verdicts(results()) == {
        "single_vs_celery_recommended": True,  # 170 >= 170
        "batch_vs_broker": True,  # 0.8 >= 0.8
        "batch_vs_procrastinate": False,  # 600 is not ahead of 600
        "floor_ratio": True,  # 0.6 >= 0.6
        "quiet_tenant_p95": True,  # 2.0 <= 2
        "kill_run": True,
    }


def test_targets_missed_and_not_measured() -> None:
    r = results(
        ratio_to_broker_batch_submit=0.79,
        single_submission_floor={"ratio": 0.59},
        kill_run={"not_succeeded": 0, "completed_twice": 1, "effects_not_once": 0},
    )
    r["tasklease"]["jobs_per_s"] = 169.9
    r["procrastinate"]["jobs_per_s"] = 599.0
    r["noisy_neighbour"]["tenants"]["started"]["busy"] = 49  # one never started
    assert verdicts(r) == {
        "single_vs_celery_recommended": False,
        "batch_vs_broker": False,
        "batch_vs_procrastinate": True,
        "floor_ratio": False,
        "quiet_tenant_p95": False,
        "kill_run": False,
    }
    gone = verdicts(
        results(celery_recommended={"jobs_per_s": None}, kill_run=None, noisy_neighbour=None)
    )
    assert gone["single_vs_celery_recommended"] is None
    assert gone["kill_run"] is None and gone["quiet_tenant_p95"] is None


def test_target_rows_follow_the_reports_met_or_missed() -> None:
    r = results(ratio_to_broker_batch_submit=0.59)
    r["targets"] = cost_per_job.targets(r)
    rows = dict(cost_per_job.target_rows(r))
    assert rows["target (issue 37): 1 job/request: jobs/s ≥ celery recommended's"] == (
        "170 vs 170 jobs/s (1.00x): met"
    )
    assert rows["target (issue 37): 10 jobs/request: ≥ 0.8 x the raw broker cycle"] == (
        "0.59 x (600 jobs/s, 750 msgs/s): MISSED"
    )
    # Beside the verdict on procrastinate, what a job cost each side.
    assert rows["target (issue 37): 10 jobs/request: jobs/s > procrastinate's"] == (
        "600 vs 600 jobs/s (1.00x): MISSED"  # no cost table in these results
    )
    r["cost_per_job"] = cost_per_job.table_figures(r)
    r["targets"] = cost_per_job.targets(r)
    rows = dict(cost_per_job.target_rows(r))
    assert rows["target (issue 37): 10 jobs/request: jobs/s > procrastinate's"] == (
        "600 vs 600 jobs/s (1.00x); CPU ms/job: tasklease 3.3 (3 less the SQS server's 0.3), "
        "procrastinate 1.8: MISSED"
    )
    r["kill_run"] = None
    r["targets"] = cost_per_job.targets(r)
    kill = dict(cost_per_job.target_rows(r))[
        "target (issue 37): kill run: 0 lost, 0 completed twice, 0 effects missing or twice"
    ]
    assert kill == "not run: not measured"


def test_measured_divides_the_phase_totals_by_its_jobs() -> None:
    m = cost_per_job.measured(
        {"api_cpu_ms": 1.25, "workers_cpu_ms": 2.0, "window_s": 3.0}, 500.0, 200
    )
    assert (m["producer_cpu_ms"], m["workers_cpu_ms"], m["pg_exec_ms"]) == (1.25, 2.0, 2.5)
    assert m["broker_server_cpu_ms"] is None  # not measured: shown as —
    assert cost_per_job.measured({}, None, 200)["pg_exec_ms"] is None


BURN = "import time\nwhile time.process_time() < 0.3: pass\n"


def _tree_after(script: str) -> float | None:
    """A shell running ``script``: its tree's CPU once it has printed a line."""
    with subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True) as shell:
        try:
            assert shell.stdout is not None
            assert shell.stdout.readline().strip() == "burnt"
            return tree_cpu_s([shell.pid])
        finally:
            shell.kill()


def test_a_process_tree_counts_its_children_alive_and_reaped() -> None:
    """A shell whose child burns 0.3 s of CPU: the tree counts the child while it lives
    (a descendant: a prefork child, a backend) and once the shell has reaped it (the
    shell's cutime)."""
    alive = f"{sys.executable} -c '{BURN}print(\"burnt\", flush=True)\nimport time\ntime.sleep(30)'"
    counted = _tree_after(alive)
    assert counted is not None and counted >= 0.25
    reaped = _tree_after(f"{sys.executable} -c '{BURN}'; echo burnt; sleep 30")
    assert reaped is not None and reaped >= 0.25
    with subprocess.Popen(["true"]) as gone:
        gone.wait()
    assert tree_cpu_s([gone.pid]) is None  # a process gone: unknown, not zero


def test_the_meter_counts_this_process_alone_for_a_producer() -> None:
    with subprocess.Popen([sys.executable, "-c", BURN]) as child:
        meter = CpuMeter({"producer": [SELF], "child": [child.pid]}).start()
        deadline = time.process_time() + 0.05
        while time.process_time() < deadline:
            pass
        seconds = meter.seconds()  # read before the child is reaped
    assert seconds["producer"] is not None and seconds["producer"] >= 0.05
    per = meter.ms_per_job(10)
    assert set(per) == {"producer_cpu_ms", "child_cpu_ms", "window_s"}
