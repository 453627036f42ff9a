"""Tools beside the runtime, never in the Lambda package: the local stack
(``stack``: what ``make run`` / ``tasklease dev`` start) and the chaos harness
(``chaos``: ``tasklease chaos``). The runtime (``app.api``, ``app.worker``,
``app.services``, ``handlers``) never imports them (.importlinter).
"""
