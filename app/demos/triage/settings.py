"""The triage demo's own settings: which model answers (the fake, or an OpenAI-compatible
server), how the fake behaves, and where the draft reply is posted. They are TASKLEASE_*
variables like tasklease's own, read by the demo's deps factory when a worker starts, and
not part of tasklease's settings: a deployment without the demos has none of them.

A kind of your own reads its settings the same way: a pydantic-settings class, read in
its deps factory, so a bad value stops the worker at start-up naming the variable.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app import errors
from app.settings import config


class TriageSettings(BaseSettings):
    """support.triage's model and webhook (and agent.research's and demo.write's, which
    share its deps)."""

    model_config = SettingsConfigDict(env_prefix=config.PREFIX, extra="ignore", frozen=True)

    model_provider: Literal["fake", "openai"] = Field(
        "fake",
        description="the model behind the demos: the built-in fake, or an OpenAI-compatible server",
    )
    openai_base_url: str | None = Field(
        None, description="the OpenAI-compatible server's base URL (…/v1); needed for openai"
    )
    openai_api_key: str | None = Field(default=None, repr=False, description="its API key")
    openai_model: str = Field("gpt-4o-mini", description="the model asked for")
    # How a partial answer is handed back to be continued (docs/howto/streams.md): a
    # trailing assistant message; plus vLLM's continue_final_message; or "prefix": true on
    # it (DeepSeek's /beta, Mistral).
    openai_prefill: Literal["assistant", "vllm", "prefix"] = Field(
        "assistant", description="how a partial answer is handed back to be continued"
    )
    model_timeout_seconds: float = Field(120.0, gt=0, description="one model call's timeout")
    fake_model_latency_ms: int = Field(
        200, ge=0, le=3_600_000, description="the fake model's time to answer"
    )
    fake_model_transient_rate: float = Field(
        0.0, ge=0, le=1, description="the share of fake calls that fail and may be retried"
    )
    fake_model_permanent_rate: float = Field(
        0.0, ge=0, le=1, description="the share of fake calls refused for good"
    )
    fake_model_slow_rate: float = Field(
        0.0, ge=0, le=1, description="the share of fake calls that take fake_model_slow_ms"
    )
    fake_model_slow_ms: int = Field(5000, ge=0, le=3_600_000, description="a slow fake call")
    fake_model_log: str | None = Field(
        None, description="append-only JSON lines, one per fake model call, shared by all processes"
    )
    fake_model_chunk_ms: int = Field(
        20, ge=0, le=60_000, description="the fake's streamed answers: the wait before each piece"
    )
    fake_model_throttle_rate: float = Field(
        0.0, ge=0, le=1, description="the share of fake calls answered 429"
    )
    fake_model_retry_after_seconds: int = Field(
        1, ge=0, le=3600, description="the fake's Retry-After on a 429 (0: no header)"
    )
    webhook_url: str | None = Field(None, description="where support.triage posts its draft reply")
    webhook_timeout_seconds: float = Field(10.0, gt=0, description="the webhook's timeout")

    @model_validator(mode="after")
    def _openai_needs_a_server(self) -> Self:
        if self.model_provider == "openai" and not self.openai_base_url:
            raise ValueError(
                "TASKLEASE_OPENAI_BASE_URL is required when TASKLEASE_MODEL_PROVIDER is 'openai'"
            )
        return self

    def need(self, *names: str) -> None:
        """Fail fast when a setting the chosen provider needs is not set."""
        missing = [config.PREFIX + n.upper() for n in names if not getattr(self, n)]
        if missing:
            raise errors.ConfigError(f"{', '.join(missing)} must be set")


def load(**overrides: object) -> TriageSettings:
    """The demo's settings from the environment (and ``overrides``, for tests); a bad value
    raises ConfigError naming the variable."""
    return config.read(TriageSettings, **overrides)
