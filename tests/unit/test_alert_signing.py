"""The alerts' signatures follow the Standard Webhooks specification (its published test
vector), verification refuses what it must, the settings name what is wrong, and Slack
gets its own escaped text."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from app import errors
from app.services import alert_messages, alerts
from app.settings import config
from app.settings.alerts import is_slack
from app.store.alerts import DueAlert
from tasklease.webhooks import (
    WebhookVerificationError,
    new_secret,
    sign_webhook,
    verify_webhook,
)

pytestmark = pytest.mark.unit

# The specification's example (standardwebhooks.com; every reference library tests it).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TS = 1614265330
SPEC_BODY = '{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_signature_is_the_specifications_test_vector() -> None:
    headers = sign_webhook(SPEC_SECRET, SPEC_ID, SPEC_BODY.encode(), now=SPEC_TS)
    assert headers == {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TS),
        "webhook-signature": SPEC_SIGNATURE,
    }
    assert verify_webhook(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TS + 10) == {"test": 2432232314}


def test_verification_refuses_what_is_not_signed_with_the_secret() -> None:
    good = {"Webhook-Id": SPEC_ID, "Webhook-Timestamp": str(SPEC_TS)}
    signed = {**good, "Webhook-Signature": SPEC_SIGNATURE}
    cases = {
        "missing header": (SPEC_SECRET, good, SPEC_BODY, SPEC_TS),
        "301 s from now": (SPEC_SECRET, signed, SPEC_BODY, SPEC_TS + 301),  # too old
        "-301 s from now": (SPEC_SECRET, signed, SPEC_BODY, SPEC_TS - 301),  # from the future
        "no signature matches": (SPEC_SECRET, signed, SPEC_BODY + " ", SPEC_TS),
    }
    for said, (secret, headers, body, now) in cases.items():
        with pytest.raises(WebhookVerificationError, match=said):
            verify_webhook(secret, headers, body, now=now)
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        verify_webhook(new_secret(), signed, SPEC_BODY, now=SPEC_TS)
    # Several signatures (a secret being rotated): any one that matches will do.
    rotated = {**good, "webhook-signature": f"v1,bm9wZQ== {SPEC_SIGNATURE}"}
    assert verify_webhook(SPEC_SECRET, rotated, SPEC_BODY, now=SPEC_TS)["test"] == 2432232314


def test_a_made_secret_verifies_its_own_signatures() -> None:
    secret = new_secret()
    body = b'{"type":"job.dead_lettered"}'
    headers = sign_webhook(secret, "dead_lettered:j:1", body)
    assert verify_webhook(secret, headers, body)["type"] == "job.dead_lettered"


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            {"alert_webhook_url": "https://x.example/h"},
            "TASKLEASE_ALERT_WEBHOOK_SECRET must be set",
        ),
        (
            {"alert_webhook_url": "https://x.example/h", "alert_webhook_secret": "s3cret"},
            "TASKLEASE_ALERT_WEBHOOK_SECRET: a webhook secret starts with 'whsec_'",
        ),
        (
            {"alert_webhook_url": "https://x.example/h", "alert_webhook_secret": "whsec_AAAA"},
            "TASKLEASE_ALERT_WEBHOOK_SECRET: a webhook secret's key is 24 to 64 bytes",
        ),
        ({"alert_webhook_url": "mailto:ops@x"}, "TASKLEASE_ALERT_WEBHOOK_URL: 'mailto:ops@x'"),
        ({"alert_dlq_threshold": 0}, "TASKLEASE_ALERT_DLQ_THRESHOLD"),
        (
            {"alert_backoff_base_seconds": 10, "alert_backoff_cap_seconds": 5},
            "TASKLEASE_ALERT_BACKOFF_CAP_SECONDS must be at least",
        ),
    ],
)
def test_bad_alert_settings_name_the_variable(env: dict[str, object], said: str) -> None:
    with pytest.raises(errors.ConfigError, match=said.replace("(", r"\(")):
        config.load(**env)


def test_a_slack_webhook_needs_no_secret_and_gets_escaped_text() -> None:
    s = config.load(alert_webhook_url="https://hooks.slack.com/services/T/B/x")
    assert s.alerts_out and is_slack(str(s.alert_webhook_url))
    assert not is_slack("https://hooks.slack.com.evil.example/x")
    alert = DueAlert(
        id=1,
        dedup_key="dead_lettered:j:1",
        type="job.dead_lettered",
        tenant="acme",
        job_id=uuid.uuid4(),
        detail={"kind": "k", "attempt": 3, "max_attempts": 3, "error": "<!channel> & <b>"},
        created_at=dt.datetime.now(dt.UTC),
        delivered=(),
        attempts=0,
    )
    text = alert_messages.slack_body(alert)["text"]
    assert "&lt;!channel&gt; &amp; &lt;b&gt;" in text
    assert "<" not in text and "dead-lettered after attempt 3/3" in text
    body = alert_messages.body(alert)
    assert (body["id"], body["type"], body["data"]["error"]) == (
        "dead_lettered:j:1",
        "job.dead_lettered",
        "<!channel> & <b>",
    )


def test_the_backoff_doubles_up_to_its_cap() -> None:
    s = config.load(alert_backoff_base_seconds=2, alert_backoff_cap_seconds=30)
    for attempts, ceiling in [(1, 2), (2, 4), (3, 8), (4, 16), (5, 30), (40, 30)]:
        wait = alerts.backoff(s, attempts)
        assert ceiling / 2 <= wait <= ceiling, (attempts, wait)
