"""A price file that is wrong is refused before anything is priced, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app import errors
from app.cost.prices import load_prices, parse_prices
from tests.unit.test_cost_model import price_doc

pytestmark = pytest.mark.unit


def refused(doc: Any) -> str:
    with pytest.raises(errors.ConfigError) as info:
        parse_prices(doc, "p.json")
    return str(info.value)


def test_a_missing_price_is_named() -> None:
    doc = price_doc()
    del doc["prices"]["sqs_standard_request"]
    assert "prices.sqs_standard_request is missing" in refused(doc)


def test_a_negative_price_is_named() -> None:
    doc = price_doc()
    doc["prices"]["rds_instance_hour"]["usd"] = -0.016
    message = refused(doc)
    assert "prices.rds_instance_hour.usd" in message
    assert ">= 0" in message


@pytest.mark.parametrize("bad", ["0.4", None, True, float("inf")])
def test_a_price_that_is_not_a_number_is_named(bad: Any) -> None:
    doc = price_doc()
    doc["prices"]["lambda_request"]["usd"] = bad
    assert "prices.lambda_request.usd" in refused(doc)


def test_a_zero_unit_count_is_refused() -> None:
    doc = price_doc()
    doc["prices"]["lambda_request"]["per"] = 0
    assert "prices.lambda_request.per must be above 0" in refused(doc)


def test_a_price_without_its_source_is_refused() -> None:
    doc = price_doc()
    del doc["prices"]["durable_operation"]["source"]
    assert "prices.durable_operation.source" in refused(doc)


@pytest.mark.parametrize("key", ["region", "date", "currency"])
def test_the_table_says_where_and_when(key: str) -> None:
    doc = price_doc()
    doc[key] = ""
    assert f"'{key}'" in refused(doc)


def test_files_that_are_not_there_or_not_json(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="does not exist"):
        load_prices(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(errors.ConfigError, match="is not JSON"):
        load_prices(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(price_doc()))
    assert load_prices(good)["lambda_request"] == pytest.approx(1e-6)


def test_a_huge_integer_price_is_refused_not_an_overflow() -> None:
    doc = price_doc()
    doc["prices"]["lambda_request"]["usd"] = 10**400
    assert "prices.lambda_request.usd: must be a finite number" in refused(doc)


def test_a_per_so_small_the_price_is_infinite_is_refused() -> None:
    doc = price_doc()
    doc["prices"]["lambda_request"]["per"] = 1e-320
    assert "prices.lambda_request: usd / per is not a finite price" in refused(doc)


def test_another_currency_is_refused() -> None:
    doc = price_doc()
    doc["currency"] = "EUR"
    assert "currency: only USD" in refused(doc)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="cannot be read"):
        load_prices(tmp_path)
