"""`tasklease cost` on the committed figures (bench/results/cost.json): the tables carry
the lines, --json the report, a bad price file stops it before any table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from app.cli.cost import FIGURES, PRICES_ENV
from app.cli.main import cli
from tests.unit.test_cost_model import price_doc

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI's consoles read COLUMNS once, when app.cli.render is first imported: under
    # pytest-xdist a worker has COLUMNS=80 then, and the tables wrap their labels and the
    # errors their paths. These tests read the output unwrapped (1000 columns).
    monkeypatch.setattr("app.cli.cost.out", Console(width=1000))
    monkeypatch.setattr("app.cli.runner.err", Console(stderr=True, width=1000))


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["cost", "--figures", str(FIGURES), *args], env={"COLUMNS": "160", **(env or {})}
    )
    return result.exit_code, result.output


def test_the_tables_carry_every_line() -> None:
    code, out = invoke()
    assert code == 0, out
    for text in (
        "demo.noop: USD per million jobs",
        "support.triage: USD per million jobs",
        "API Gateway (HTTP API)",
        "Lambda: worker function",
        "SQS SendMessageBatch (code)",
        "SQS ReceiveMessage (event source mapping)",
        "SQS DeleteMessageBatch (event source mapping)",
        "1 job per worker call (low traffic)",
        "singly, backlog (worker batches of 10)",
        "batches of 10, backlog",
        "CloudWatch Logs: Lambda's own lines",
        "CloudWatch Logs: API access log",
        "X-Ray traces recorded",
        "CloudWatch custom metrics",
        "CloudWatch alarms",
        "NAT gateway: Elastic IP",
        "total without the NAT gateway",
        "only with a standing backlog",
        "DB round trips per job",
        "RDS instance",
        "VPC interface endpoints",
        "SQS: idle long polling",
        "Sweeper: EventBridge Scheduler",
        "Durable operations",
        "cheaper above",
        "Prices: us-east-1",
        "not found:",
        "Assumptions",
    ):
        assert text in out, text


def test_json_is_the_report() -> None:
    code, out = invoke("--json", "--arch", "x86_64", "--model-seconds", "5")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["options"]["arch"] == "x86_64"
    assert doc["options"]["model_seconds"] == 5
    assert {r["kind"] for r in doc["per_million_jobs"]} == {"demo.noop", "support.triage"}
    assert {c["kind"] for c in doc["durable_functions"]} == {"demo.noop", "support.triage"}
    assert doc["fixed_per_month"]["lines"][0]["name"] == "RDS instance"
    assert doc["prices"]["items"]["durable_operation"]["source"].startswith("https://")


def test_a_slower_model_costs_the_triage_worker_more() -> None:
    def worker(seconds: str) -> float:
        doc = json.loads(invoke("--json", "--model-seconds", seconds)[1])
        run = next(
            r
            for r in doc["per_million_jobs"]
            if r["kind"] == "support.triage" and r["mode"].endswith("(low traffic)")
        )
        return float(next(x["usd"] for x in run["lines"] if x["name"] == "Lambda: worker function"))

    assert worker("10") > worker("1")


def test_a_bad_price_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    doc = price_doc()
    doc["prices"]["api_gateway_http_request"]["usd"] = -1
    bad = tmp_path / "prices.json"
    bad.write_text(json.dumps(doc))
    code, out = invoke("--prices", str(bad))
    assert code == 2
    assert "prices.api_gateway_http_request.usd" in out
    assert "USD per million jobs" not in out


def test_the_price_file_can_come_from_the_environment(tmp_path: Path) -> None:
    doc = price_doc()
    doc["region"] = "eu-west-1"
    f = tmp_path / "prices.json"
    f.write_text(json.dumps(doc))
    code, out = invoke("--json", env={PRICES_ENV: str(f)})
    assert code == 0, out
    assert json.loads(out)["prices"]["region"] == "eu-west-1"


def test_missing_figures_say_how_to_make_them(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["cost", "--figures", str(tmp_path / "none.json")])
    assert result.exit_code == 2
    assert "make cost" in result.output


def test_memory_out_of_lambdas_range_is_refused() -> None:
    code, out = invoke("--worker-memory-mb", "64")
    assert code == 2
    assert "worker_memory_mb" in out


@pytest.mark.parametrize("seconds", ["nan", "inf", "1e308", "301", "-1"])
def test_a_model_time_out_of_range_is_refused(seconds: str) -> None:
    code, out = invoke("--model-seconds", seconds)
    assert code == 2, out
    assert "model_seconds: 0 to 300" in out
    assert "Traceback" not in out


def test_prices_that_overflow_the_report_are_refused_not_printed_as_infinity(
    tmp_path: Path,
) -> None:
    doc = price_doc()
    doc["prices"]["lambda_gb_second_arm64"] |= {"usd": 1e300, "per": 1e-8}
    f = tmp_path / "prices.json"
    f.write_text(json.dumps(doc))
    code, out = invoke("--json", "--prices", str(f))
    assert code == 2, out
    assert "check the price file" in out
    assert "Infinity" not in out


def test_without_a_nat_gateway_the_output_says_a_real_model_needs_one() -> None:
    code, out = invoke("--no-nat-gateway")
    assert code == 0, out
    assert "a real model needs it" in out
    assert "NAT gateway: Elastic IP" not in out
    doc = json.loads(invoke("--json", "--model-seconds", "0")[1])
    assert doc["options"]["nat_gateway"] is False
    doc = json.loads(invoke("--json", "--model-seconds", "0", "--nat-gateway")[1])
    assert doc["options"]["nat_gateway"] is True


def test_xray_sampling_and_storage_are_options() -> None:
    def xray(*args: str) -> float:
        doc = json.loads(invoke("--json", *args)[1])
        run = doc["per_million_jobs"][0]
        return float(next(x["usd"] for x in run["lines"] if x["name"].startswith("X-Ray")))

    assert xray("--xray-sampled", "0.05") == pytest.approx(xray() * 0.05, rel=1e-3)
    code, out = invoke("--xray-sampled", "2")
    assert code == 2 and "xray_sampled" in out
    code, out = invoke("--db-storage-gb", "5")
    assert code == 2 and "db_storage_gb" in out


@pytest.mark.parametrize("option", ["--figures", "--prices"])
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"region": "\xff\xfe"}', "is not UTF-8 text"),
        (b"[" * 200_000, "nested too deeply"),
    ],
)
def test_a_file_that_is_not_utf8_or_too_deep_is_refused(
    tmp_path: Path, option: str, content: bytes, said: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    result = CliRunner().invoke(cli, ["cost", "--figures", str(FIGURES), option, str(bad)])
    assert result.exit_code == 2, result.output
    said_out = " ".join(result.output.split())  # unwrapped
    assert str(bad) in said_out
    assert said in said_out
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_model_calls_that_outlast_the_worker_are_refused(tmp_path: Path) -> None:
    doc = json.loads(FIGURES.read_text())
    doc["kinds"]["support.triage"]["model_calls_per_job"] = 100
    f = tmp_path / "cost.json"
    f.write_text(json.dumps(doc))
    result = CliRunner().invoke(
        cli, ["cost", "--figures", str(f), "--model-seconds", "300"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2, result.output
    assert "above the worker function's timeout of 300 s" in result.output
    assert "USD per million jobs" not in result.output


def test_the_break_even_says_which_xray_sampling_it_used() -> None:
    code, out = invoke(env={"COLUMNS": "400"})
    assert code == 0, out
    assert "break-evens at the default rule's share at their rate" in out
    assert "X-Ray there: API" in out
    code, out = invoke("--xray-sampled", "1", env={"COLUMNS": "400"})
    assert code == 0, out
    assert "X-Ray 100% traced (--xray-sampled)" in out
    assert "X-Ray there: API 100%, worker 100%, durable 100%" in out
