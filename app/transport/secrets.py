"""The database credentials on AWS: the RDS-managed secret in Secrets Manager.

Here because this package is the only one that talks to AWS (boto3/botocore); the
settings only build the URL from what this reads.
"""

from __future__ import annotations

import functools
import json

import boto3
import botocore.exceptions

from app import errors
from app.config import Settings


@functools.cache
def rds_credentials(arn: str, region: str) -> tuple[str, str]:
    """username and password from a Secrets Manager secret in RDS's format.

    Read once per process: a rotated password reaches a warm Lambda on its next cold
    start (infra/README.md says so), which RDS's rotation window allows for."""
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


def with_database_url(settings: Settings) -> Settings:
    """The settings with TASKLEASE_DATABASE_URL filled in from the RDS secret, when the
    deployment names a secret instead of a URL; as they are otherwise."""
    if settings.database_url or not settings.database_secret_arn:
        return settings
    settings.need("database_url")  # the secret alone is not enough: host and name too
    user, password = rds_credentials(settings.database_secret_arn, settings.region)
    return settings.model_copy(update={"database_url": settings.database_url_from(user, password)})
