"""The price table of `tasklease cost`: app/cost/aws_prices.json, or a file given with
``--prices`` (or TASKLEASE_COST_PRICES) of the same shape. Every price must be there, a
number not below zero, with its source URL; anything else is an error naming the field,
before anything is priced."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import errors

DEFAULT_PRICES = Path(__file__).with_name("aws_prices.json")

REQUIRED_PRICES = (
    "lambda_request",
    "lambda_gb_second_x86_64",
    "lambda_gb_second_arm64",
    "api_gateway_http_request",
    "sqs_standard_request",
    "eventbridge_scheduler_invocation",
    "cloudwatch_logs_ingested_gb",
    "rds_instance_hour",
    "rds_gp3_gb_month",
    "rds_instance_hour_multi_az",
    "rds_gp3_gb_month_multi_az",
    "egress_only_internet_gateway_hour",
    "vpc_interface_endpoint_hour",
    "nat_gateway_hour",
    "public_ipv4_address_hour",
    "xray_trace_recorded",
    "cloudwatch_custom_metric_month",
    "cloudwatch_alarm_month",
    "secrets_manager_secret_month",
    "durable_operation",
    "durable_data_written_gb",
    "durable_data_retained_gb_month",
)


@dataclass(frozen=True)
class Price:
    usd: float
    per: float
    unit: str
    source: str
    note: str = ""

    @property
    def each(self) -> float:
        return self.usd / self.per


@dataclass(frozen=True)
class PriceTable:
    region: str
    date: str
    currency: str
    prices: dict[str, Price]
    not_found: dict[str, str]
    path: str

    def __getitem__(self, name: str) -> float:
        return self.prices[name].each


def _number(doc: dict[str, Any], key: str, where: str) -> float:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise errors.ConfigError(f"{where}.{key}: a number is needed, got {v!r}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if f < 0 or not math.isfinite(f):
        raise errors.ConfigError(f"{where}.{key}: must be a finite number >= 0, got {v!r:.40}")
    return f


def parse_prices(doc: Any, path: str) -> PriceTable:
    """A price table from its JSON document; a missing or bad field is an error naming it."""
    if not isinstance(doc, dict):
        raise errors.ConfigError(f"{path}: a JSON object is needed")
    for key in ("region", "date", "currency"):
        if not isinstance(doc.get(key), str) or not doc[key].strip():
            raise errors.ConfigError(f"{path}: '{key}' (a non-empty string) is missing")
    if doc["currency"] != "USD":
        raise errors.ConfigError(
            f"{path}: currency: only USD is supported (every figure is shown in $), "
            f"got {doc['currency']!r}"
        )
    raw = doc.get("prices")
    if not isinstance(raw, dict):
        raise errors.ConfigError(f"{path}: 'prices' (an object of prices) is missing")
    prices: dict[str, Price] = {}
    for name in REQUIRED_PRICES:
        entry = raw.get(name)
        where = f"prices.{name}"
        if not isinstance(entry, dict):
            raise errors.ConfigError(f"{path}: {where} is missing")
        per = _number(entry, "per", where)
        if per == 0:
            raise errors.ConfigError(f"{path}: {where}.per must be above 0")
        source = entry.get("source")
        if not isinstance(source, str) or not source.startswith("http"):
            raise errors.ConfigError(f"{path}: {where}.source (the price's URL) is missing")
        prices[name] = Price(
            usd=_number(entry, "usd", where),
            per=per,
            unit=str(entry.get("unit", "")),
            source=source,
            note=str(entry.get("note", "")),
        )
        if not math.isfinite(prices[name].each):
            raise errors.ConfigError(f"{path}: {where}: usd / per is not a finite price")
    not_found = doc.get("not_found") or {}
    if not isinstance(not_found, dict):
        raise errors.ConfigError(f"{path}: 'not_found' must be an object of notes")
    return PriceTable(
        region=doc["region"],
        date=doc["date"],
        currency=doc["currency"],
        prices=prices,
        not_found={str(k): str(v) for k, v in not_found.items()},
        path=path,
    )


def read_json(path: Path, what: str, missing: str = "") -> Any:
    """A JSON file's document; a file that is missing, unreadable, not UTF-8, not JSON or
    nested too deeply for the parser is an error naming the file (``what`` says which)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError as exc:
        raise errors.ConfigError(f"{what} {path} does not exist{missing}") from exc
    except OSError as exc:
        raise errors.ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise errors.ConfigError(
            f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise errors.ConfigError(f"{what} {path} is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise errors.ConfigError(
            f"{what} {path} is not a usable JSON document: nested too deeply to parse"
        ) from exc


def load_prices(path: Path | None = None) -> PriceTable:
    p = path or DEFAULT_PRICES
    return parse_prices(read_json(p, "price file"), str(p))
