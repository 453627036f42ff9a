"""EMF documents from the registry's samples: increments only, one object per label
values, never more than 100 metrics in one."""

from __future__ import annotations

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
