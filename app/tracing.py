"""OpenTelemetry tracing: the tracer every layer starts its spans from.

Without a configured SDK the OpenTelemetry API is a no-op, so code may start spans
unconditionally.
"""

from __future__ import annotations

from opentelemetry import trace

tracer = trace.get_tracer("tasklease")
