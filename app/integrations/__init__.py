"""Integrations of tasklease's kinds with agent frameworks, each behind its optional extra.

Kinds-layer code: an integration imports ``app.kinds`` and ``app.errors`` (and its
framework), never the worker, the store or the transport; the runtime never imports it.
"""
