"""The charts' fixed log-scale histogram (app/services/charts.py): a duration's bucket,
and p50/p95 read back from summed buckets within the bucket that holds the true value.
(The database's chart_bucket() is checked against bucket_of in
tests/integration/test_charts.py.)"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from app.services import charts

pytestmark = pytest.mark.unit


def test_buckets_are_four_a_decade_from_10_ms_and_catch_everything() -> None:
    assert charts.BUCKETS == len(charts.EDGES) == 29
    assert charts.bucket_of(0) == charts.bucket_of(0.0177) == 0
    assert charts.bucket_of(0.0178) == 1
    assert charts.bucket_of(1.0) == 8  # [1 s, 1.78 s)
    assert charts.bucket_of(1.77) == 8 and charts.bucket_of(1.78) == 9
    assert charts.bucket_of(86_400) == 27  # a day
    assert charts.bucket_of(10**9) == 28  # anything longer, in the last bucket
    for k in range(1, charts.BUCKETS):
        assert charts.bucket_of(charts.EDGES[k] * 1.0001) == k


def test_an_empty_histogram_has_no_percentile() -> None:
    assert charts.percentile({}, 0.5) is None
    assert charts.percentile({3: 0}, 0.95) is None


def test_one_value_s_percentiles_stay_inside_its_bucket() -> None:
    b = charts.bucket_of(2.5)
    for q in (0.5, 0.95):
        got = charts.percentile({b: 1}, q)
        assert got is not None and charts.EDGES[b] <= got <= charts.EDGES[b + 1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_of_many_durations_are_within_a_bucket_of_the_true_ones(seed: int) -> None:
    rng = random.Random(seed)
    durations = sorted(rng.lognormvariate(0, 1.5) for _ in range(5000))
    hist = Counter(charts.bucket_of(d) for d in durations)
    for q in (0.5, 0.95):
        true = durations[int(q * len(durations)) - 1]
        got = charts.percentile(dict(hist), q)
        assert got is not None
        assert true / 1.78 <= got <= true * 1.78, (q, true, got)


def test_summing_histograms_is_the_histogram_of_the_union() -> None:
    a, b = Counter({5: 3, 9: 1}), Counter({9: 2, 12: 4})
    assert charts.percentile(dict(a + b), 0.5) == charts.percentile({5: 3, 9: 3, 12: 4}, 0.5)
