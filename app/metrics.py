"""The process's metrics, in Prometheus' client library (``GET /metrics``).

Every metric tasklease counts is declared here, so a name is defined once and every
layer that counts (the store's round trips, the transport's requests, the engine's
outcomes, a model call's tokens) imports the same object.
"""

from __future__ import annotations

from prometheus_client import Counter

MODEL_TOKENS = Counter(
    "tasklease_model_tokens",
    "Tokens model providers reported, by job kind, model and direction (input, output).",
    ["kind", "model", "direction"],
)
MODEL_COST = Counter(
    "tasklease_model_cost_dollars",
    "Estimated cost of model calls in US dollars (TASKLEASE_MODEL_PRICES), by kind and model.",
    ["kind", "model"],
)
