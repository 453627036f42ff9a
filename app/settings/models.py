"""The model providers' settings that are JSON objects: prices per model
(TASKLEASE_MODEL_PRICES) and shared budgets per provider and model
(TASKLEASE_MODEL_BUDGETS), parsed and checked, and the settings of model calls (``ModelCallSettings``, a part of
``app.settings.config.Settings``)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode

from app.settings import aws_limits as limits


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


class ModelCallSettings(BaseSettings):
    """How model calls are throttled, budgeted and priced. A part of
    ``app.settings.config.Settings``."""

    # A throttle (429, 503 with Retry-After) retries after the provider's delay without
    # using an attempt; past this many throttles of one job it is dead-lettered.
    max_throttles: int = Field(
        20,
        ge=1,
        le=100_000,
        description="a throttled model call (429, or 503 with Retry-After) retries after the provider's delay without using an attempt; past this many throttles of one job it is dead-lettered",
    )
    # The delay when the provider gives none (jittered), and the most a provider may ask.
    throttle_delay_seconds: float = Field(
        5.0,
        gt=0,
        le=limits.MAX_VISIBILITY_SECONDS,
        description="the delay after a throttle when the provider gives none (jittered)",
    )
    max_throttle_delay_seconds: float = Field(
        300.0,
        gt=0,
        le=limits.MAX_VISIBILITY_SECONDS,
        description="the longest delay a provider may ask for",
    )
    # Shared budgets per "provider/model" (JSON: {"openai/gpt-4o-mini": {"rpm": 500,
    # "tpm": 200000}}): a call over it waits. None set: no reservation round trip.
    model_budgets: Annotated[dict[str, ModelBudget], NoDecode] = Field(
        default_factory=dict,
        description='shared budgets per "provider/model", as JSON ({"openai/gpt-4o-mini": {"rpm": 500, "tpm": 200000}}): a call over it waits; none set: no reservation round trip',
    )
    # A tenant's model tokens per UTC day (default; `tasklease limits set --daily-tokens`
    # per tenant). Unset: no daily budget unless a tenant has one.
    tenant_daily_tokens: int | None = Field(
        None,
        ge=1,
        le=10**15,
        description="a tenant's model tokens per UTC day (per-tenant: `tasklease limits set --daily-tokens`); unset: no daily budget unless a tenant has one",
    )
    # Past a tenant's daily budget its model calls wait for the next UTC day, or fail.
    tenant_budget_policy: Literal["wait", "fail"] = Field(
        "wait",
        description="past a tenant's daily budget, its model calls wait for the next UTC day, or fail",
    )
    # US dollars per million tokens, by model (JSON), over DEFAULT_MODEL_PRICES.
    model_prices: Annotated[dict[str, ModelPrice], NoDecode] = Field(
        default_factory=dict,
        description="US dollars per million tokens, by model, as JSON, over the built-in prices (usage and cost estimates)",
    )

    @field_validator("model_prices", mode="before")
    @classmethod
    def _prices_json(cls, v: Any) -> Any:
        return prices_json(v)

    @field_validator("model_budgets", mode="before")
    @classmethod
    def _budgets_json(cls, v: Any) -> Any:
        return budgets_json(v)

    @field_validator("model_prices")
    @classmethod
    def _with_default_prices(cls, v: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        return with_default_prices(v)
