"""The model providers' settings that are JSON objects: prices per model
(TASKLEASE_MODEL_PRICES) and shared budgets per provider and model
(TASKLEASE_MODEL_BUDGETS), parsed and checked for app/config.py."""

from __future__ import annotations

import json
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelPrice(BaseModel):
    """A model's price in US dollars per million tokens (TASKLEASE_MODEL_PRICES)."""

    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0, le=10_000)
    output: float = Field(ge=0, le=10_000)


class ModelBudget(BaseModel):
    """A provider's model's shared budget per calendar minute (TASKLEASE_MODEL_BUDGETS):
    requests (rpm) and tokens (tpm); at least one of the two."""

    model_config = ConfigDict(extra="forbid")
    rpm: int | None = Field(None, ge=1, le=10_000_000)
    tpm: int | None = Field(None, ge=1, le=10_000_000_000)

    @model_validator(mode="after")
    def _one_at_least(self) -> Self:
        if self.rpm is None and self.tpm is None:
            raise ValueError("a budget needs rpm, tpm or both")
        return self


# Estimates (list prices, $/1M tokens); TASKLEASE_MODEL_PRICES overrides or adds.
DEFAULT_MODEL_PRICES: dict[str, dict[str, float]] = {
    "fake-writer-1": {"input": 0.1, "output": 0.4},
    "fake-triage-1": {"input": 0.1, "output": 0.4},
    "gpt-4o-mini": {"input": 0.15, "output": 0.6},
    "gpt-4o": {"input": 2.5, "output": 10.0},
    "gpt-4.1-mini": {"input": 0.4, "output": 1.6},
}


def prices_json(v: Any) -> Any:
    """TASKLEASE_MODEL_PRICES as given in the environment: JSON text, or already parsed."""
    if isinstance(v, str):
        try:
            return json.loads(v) if v.strip() else {}
        except ValueError as exc:
            raise ValueError(f"not JSON ({exc}): give {{model: {{input, output}}}}") from exc
    return v


def budgets_json(v: Any) -> Any:
    """TASKLEASE_MODEL_BUDGETS as given: JSON text keyed by provider/model names."""
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else {}
        except ValueError as exc:
            raise ValueError(
                f'not JSON ({exc}): give {{"provider/model": {{"rpm": N, "tpm": N}}}}'
            ) from exc
    if isinstance(v, dict):
        for name in v:
            provider, _, model = str(name).partition("/")
            if not provider or not model:
                raise ValueError(f"{name!r} is not a provider/model name (openai/gpt-4o-mini)")
    return v


def with_default_prices(v: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
    """The default prices, overridden or added to by the ones given."""
    return {**{m: ModelPrice(**p) for m, p in DEFAULT_MODEL_PRICES.items()}, **v}
