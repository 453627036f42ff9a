"""Priorities: the weights' setting and the weighted turns the local event source polls by."""

from __future__ import annotations

import collections
import itertools

import pytest

from app import errors
from app.priorities import DEFAULT_WEIGHTS, Priority, Turns, parse_weights
from app.settings import config

pytestmark = pytest.mark.unit

HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW


def test_the_default_weights_parse() -> None:
    assert parse_weights(DEFAULT_WEIGHTS) == {HIGH: 6, NORMAL: 3, LOW: 1}
    assert parse_weights(" low=2, high=5 ,normal=1") == {HIGH: 5, NORMAL: 1, LOW: 2}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("high=6,normal=3", "no weight for low"),
        ("high=6,normal=3,low=0", "0 would starve it"),
        ("high=6,normal=3,low=1001", "from 1 to 1000"),
        ("high=6,normal=3,low=x", "whole number"),
        ("high=6,normal=3,urgent=1", "'urgent=1'"),
        ("high=6,high=3,low=1", "high is named twice"),
        ("", "give priority=weight"),
    ],
)
def test_a_bad_weight_setting_fails_at_start_up_naming_the_variable(text: str, says: str) -> None:
    with pytest.raises(errors.ConfigError, match="TASKLEASE_PRIORITY_WEIGHTS") as caught:
        config.load(priority_weights=text)
    assert says in str(caught.value)


def test_the_turns_follow_the_weights_spread_out() -> None:
    turns = Turns({HIGH: 6, NORMAL: 3, LOW: 1})
    firsts = [turns.next() for _ in range(100)]
    assert collections.Counter(firsts) == {HIGH: 60, NORMAL: 30, LOW: 10}
    # Smooth: low gets its turn in every ten, never two highs' worth of waiting more.
    for window in (firsts[i : i + 10] for i in range(0, 100, 10)):
        assert collections.Counter(window) == {HIGH: 6, NORMAL: 3, LOW: 1}
    longest_high_run = max(len(list(g)) for k, g in itertools.groupby(firsts) if k == HIGH)
    assert longest_high_run <= 2


def test_an_empty_queue_gives_its_turn_to_the_others_by_weight() -> None:
    turns = Turns({HIGH: 6, NORMAL: 3, LOW: 1})
    orders = [turns.order() for _ in range(10)]
    for order in orders:
        assert sorted(order) == sorted([HIGH, NORMAL, LOW])
        assert order[1:] == [p for p in (HIGH, NORMAL, LOW) if p != order[0]]
    assert sum(order[0] == LOW for order in orders) == 1


def test_one_queue_is_always_its_own_turn() -> None:
    turns = Turns({NORMAL: 3})
    assert [turns.order() for _ in range(3)] == [[NORMAL]] * 3


def test_the_priority_queues_are_set_together_or_not_at_all() -> None:
    base = {"queue_url": "http://q/n", "dlq_url": "http://q/n-dlq"}
    assert not config.load(**base).priority_queues
    assert config.load(**base).queue_for(HIGH) == "http://q/n"  # all share the one queue
    with pytest.raises(errors.ConfigError, match="TASKLEASE_DLQ_URL_LOW must be set too"):
        config.load(
            **base,
            queue_url_high="http://q/h",
            dlq_url_high="http://q/h-dlq",
            queue_url_low="http://q/l",
        )
    full = {
        **base,
        "queue_url_high": "http://q/h",
        "dlq_url_high": "http://q/h-dlq",
        "queue_url_low": "http://q/l",
        "dlq_url_low": "http://q/l-dlq",
    }
    s = config.load(**full)
    assert (s.queue_for(HIGH), s.dlq_for(HIGH)) == ("http://q/h", "http://q/h-dlq")
    assert (s.queue_for(LOW), s.dlq_for(LOW)) == ("http://q/l", "http://q/l-dlq")
    assert (s.queue_for(NORMAL), s.dlq_for(NORMAL)) == ("http://q/n", "http://q/n-dlq")
    with pytest.raises(errors.ConfigError, match="six different queues"):
        config.load(**{**full, "queue_url_low": "http://q/n"})
