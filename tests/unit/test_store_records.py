"""The store's records: built from rows by column name, and back to the same dict."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest

from app.states import JobState
from app.store import records

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def job_row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: None for f in dataclasses.fields(records.Job)}
    row.update(
        id=uuid.uuid4(),
        tenant="acme",
        kind="demo.noop",
        payload={},
        state="queued",
        attempt=0,
        max_attempts=3,
        timeout_seconds=60,
        request_hash="h",
        cancel_requested=False,
        redrives=0,
        runs=0,
        redriven_at=[],
        created_at=NOW,
        updated_at=NOW,
    )
    row.update(over)
    return row


def test_a_job_reads_its_state_as_the_enum_and_gives_back_the_row() -> None:
    row = job_row(state="dead_lettered")
    job = records.Job.from_row(row)
    assert job.state is JobState.DEAD_LETTERED
    assert job.to_dict() == row
    assert type(job.to_dict()["state"]) is str


def test_columns_a_record_does_not_have_are_left_at_the_edge() -> None:
    """insert_jobs and claim_batch return verdict or from_state columns beside the job's."""
    job = records.Job.from_row(job_row(outbox_id=7, from_state="queued", key_ok=True))
    assert "outbox_id" not in job.to_dict()


def test_a_missing_column_is_an_error_not_a_default() -> None:
    row = job_row()
    del row["redrives"]
    with pytest.raises(KeyError, match="redrives"):
        records.Job.from_row(row)


def test_records_are_frozen() -> None:
    job = records.Job.from_row(job_row())
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.attempt = 2  # type: ignore[misc]


def test_a_keys_hash_and_salt_are_bytes_whatever_the_loader_gave() -> None:
    secret = records.KeySecret.from_row(
        {
            "id": "0123456789ab",
            "tenant": "acme",
            "admin": False,
            "scheme": "scrypt",
            "salt": memoryview(b"salt"),
            "secret_hash": bytearray(b"hash"),
            "hash_secret_id": None,
            "revoked_at": None,
        }
    )
    assert (secret.salt, secret.secret_hash) == (b"salt", b"hash")
    assert type(secret.salt) is bytes and type(secret.secret_hash) is bytes


def test_an_admission_verdict_reads_only_its_columns() -> None:
    verdict = {
        "key_ok": True,
        "rate_ok": False,
        "wait_seconds": 1.5,
        "rate": 10.0,
        "burst": 20,
        "wanted": 3,
        "flight_ok": True,
        "max_in_flight": 100,
        "conflict_ord": None,
        "counted_recent": 20,
        "counted_flight": None,
    }
    admission = records.Admission.from_row({**verdict, **job_row()})
    assert admission.to_dict() == verdict


def test_the_wait_postgresql_computes_as_numeric_is_a_float() -> None:
    verdict = {
        "key_ok": True,
        "rate_ok": False,
        "wait_seconds": Decimal("0.25"),
        "rate": 1.0,
        "burst": 1,
        "wanted": 1,
        "flight_ok": True,
        "max_in_flight": 1,
        "counted_recent": 1,
        "counted_flight": 0,
        "conflict_ord": None,
    }
    assert records.Admission.from_row(verdict).wait_seconds == 0.25
    assert type(records.Admission.from_row(verdict).wait_seconds) is float
