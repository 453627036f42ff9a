"""On AWS the database URL is built from the RDS-managed secret at cold start (narrow unit
test: Secrets Manager is moto's in-process mock here)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from app import errors
from app.settings import config
from app.transport import secrets

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("TASKLEASE_DATABASE_URL", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SECRETS_MANAGER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    secrets.rds_credentials.cache_clear()
    with mock_aws():
        yield
    secrets.rds_credentials.cache_clear()


def test_the_database_url_is_built_from_the_secret_with_the_password_quoted() -> None:
    arn = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="rds", SecretString=json.dumps({"username": "tasklease", "password": "p@ss/w:rd"})
    )["ARN"]
    s = config.load(
        database_secret_arn=arn,
        database_host="db.internal",
        database_name="tasklease",
        database_sslmode="require",
        region="us-east-1",
    )
    s.need("database_url")
    assert (
        secrets.database_url(s)
        == "postgresql://tasklease:p%40ss%2Fw%3Ard@db.internal:5432/tasklease?sslmode=require"
    )


def test_a_missing_database_names_both_ways_to_configure_it() -> None:
    s = config.load(database_host="db.internal")
    with pytest.raises(
        errors.ConfigError, match=r"TASKLEASE_DATABASE_URL \(or TASKLEASE_DATABASE_SECRET_ARN"
    ):
        s.need("database_url")


def test_an_unreadable_secret_is_a_config_error_naming_the_variable() -> None:
    s = config.load(
        database_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:nope",
        database_host="db",
        database_name="t",
        region="us-east-1",
    )
    with pytest.raises(errors.ConfigError, match="TASKLEASE_DATABASE_SECRET_ARN: cannot read"):
        secrets.database_url(s)


def test_a_url_given_is_used_and_no_secret_is_read() -> None:
    s = config.load(database_url="postgresql://u@h/d", database_secret_arn="arn:nope")
    assert secrets.database_url(s) == "postgresql://u@h/d"
