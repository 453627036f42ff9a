"""EMF documents from the registry's samples: increments only, one object per label
values, never more than 100 metrics in one."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from handlers import emf


def test_increments_since_the_last_flush_become_emf_objects_of_at_most_100_metrics() -> None:
    registry = CollectorRegistry()
    many = [Counter(f"tasklease_test_emf_{i}", "x", registry=registry) for i in range(150)]
    kinds = Counter("tasklease_test_emf_by_kind", "x", ["kind"], registry=registry)
    took = Histogram("tasklease_test_emf_seconds", "x", ["kind"], registry=registry)
    for c in many:
        c.inc()
    kinds.labels(kind="a").inc(2)
    took.labels(kind="a").observe(0.5)

    docs = emf.documents(emf.increments(registry), now_ms=1_700_000_000_000)

    unlabelled = [d for d in docs if "kind" not in d]
    assert [len(d["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for d in unlabelled] == [100, 50]
    (by_kind,) = [d for d in docs if d.get("kind") == "a"]
    assert by_kind["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["kind"]]
    assert by_kind["tasklease_test_emf_by_kind_total"] == 2
    assert by_kind["tasklease_test_emf_seconds_count"] == 1
    assert by_kind["tasklease_test_emf_seconds_sum"] == 0.5
    units = {m["Name"]: m["Unit"] for m in by_kind["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units["tasklease_test_emf_seconds_sum"] == "Seconds"
    assert all(d["_aws"]["Timestamp"] == 1_700_000_000_000 for d in docs)

    kinds.labels(kind="a").inc()
    (again,) = emf.documents(emf.increments(registry))
    assert again["tasklease_test_emf_by_kind_total"] == 1  # the increment, not the total


def test_bounded_keeps_the_listed_metrics_under_the_listed_labels_summed() -> None:
    registry = CollectorRegistry()
    done = Counter("tasklease_test_bound_done", "x", ["kind", "outcome"], registry=registry)
    other = Counter("tasklease_test_bound_other", "x", ["kind"], registry=registry)
    for kind in ("a", "b", "c"):
        done.labels(kind=kind, outcome="succeeded").inc(2)
        other.labels(kind=kind).inc()
    done.labels(kind="a", outcome="failed").inc()

    moved = emf.bounded(
        emf.increments(registry),
        frozenset({"tasklease_test_bound_done_total"}),
        frozenset({"outcome"}),
    )
    docs = emf.documents(moved, now_ms=1)

    # three kinds' successes are one figure; the failure another; `other` is not written
    assert {(d["outcome"], d["tasklease_test_bound_done_total"]) for d in docs} == {
        ("succeeded", 6),
        ("failed", 1),
    }
    assert all(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["outcome"]] for d in docs)
    assert not any("tasklease_test_bound_other_total" in d for d in docs)
    assert emf.bounded(moved, None, None) is moved


def test_the_settings_read_all_none_and_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TASKLEASE_EMF_DIMENSIONS", raising=False)
    assert emf._setting("TASKLEASE_EMF_DIMENSIONS") is None
    for raw, want in (
        ("all", None),
        ("none", frozenset()),
        (" outcome, kind ", {"outcome", "kind"}),
    ):
        monkeypatch.setenv("TASKLEASE_EMF_DIMENSIONS", raw)
        assert emf._setting("TASKLEASE_EMF_DIMENSIONS") == want
