"""The database credentials on AWS: the RDS-managed secret in Secrets Manager.

Here because this package is the only one that talks to AWS (boto3/botocore); the
settings only build the URL from what this reads.
"""

from __future__ import annotations

import functools
import json

from app import errors
from app.settings.config import Settings


@functools.cache
def rds_credentials(arn: str, region: str) -> tuple[str, str]:
    """username and password from a Secrets Manager secret in RDS's format.

    Read once per process: a rotated password reaches a warm Lambda on its next cold
    start (infra/README.md says so), which RDS's rotation window allows for."""
    # Imported here: boto3 costs a process that never reads the secret (every command
    # and worker off AWS) about 0.4 s of start-up.
    import boto3
    import botocore.exceptions

    try:
        value = boto3.client("secretsmanager", region_name=region).get_secret_value(SecretId=arn)
        doc = json.loads(value["SecretString"])
        return str(doc["username"]), str(doc["password"])
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise errors.ConfigError(
            f"TASKLEASE_DATABASE_SECRET_ARN: cannot read the secret: {exc}"
        ) from exc
    except (KeyError, ValueError, TypeError) as exc:
        raise errors.ConfigError(
            "TASKLEASE_DATABASE_SECRET_ARN: the secret is not JSON with username and password"
        ) from exc


def database_url(settings: Settings) -> str:
    """TASKLEASE_DATABASE_URL, or on AWS the URL built from the RDS secret (read at the
    first connection, once per process), TASKLEASE_DATABASE_HOST, _PORT and _NAME."""
    settings.need("database_url")  # a URL, or the secret with a host and a name
    if settings.database_url:
        return settings.database_url
    assert settings.database_secret_arn is not None  # need() checked it
    user, password = rds_credentials(settings.database_secret_arn, settings.region)
    return settings.database_url_from(user, password)
