"""Verify tasklease's alert webhooks (docs/howto/alerts.md).

tasklease signs each alert as the Standard Webhooks specification says
(https://www.standardwebhooks.com): headers ``webhook-id`` (the alert's id: the same on
every retry of one alert), ``webhook-timestamp`` and ``webhook-signature``, an
HMAC-SHA256 of ``<id>.<timestamp>.<body>`` under the ``whsec_...`` secret. Any of that
specification's libraries verifies them too.

```python
from tasklease.webhooks import WebhookVerificationError, verify_webhook

try:
    alert = verify_webhook(secret, request.headers, await request.body())
except WebhookVerificationError:
    return Response(status_code=400)
if already_seen(request.headers["webhook-id"]):  # a retry after a lost answer
    return Response(status_code=200)
```

Imports nothing but the standard library.
"""

from app.webhook_signing import WebhookVerificationError, new_secret
from app.webhook_signing import sign as sign_webhook
from app.webhook_signing import verify as verify_webhook

__all__ = ["WebhookVerificationError", "new_secret", "sign_webhook", "verify_webhook"]
