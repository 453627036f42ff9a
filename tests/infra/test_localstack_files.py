"""localstack/docker-compose.yml and the init hook that creates the queues.

Docker is not needed: the compose file is checked as YAML, and the hook is run
against the test session's SQS server (moto, or LocalStack with
TASKLEASE_TEST_SQS=localstack) through a small `awslocal` stand-in built on boto3.
The queues it creates must carry the values the Terraform gives the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
import yaml

from tests.infra import tfconfig

COMPOSE = tfconfig.ROOT / "localstack" / "docker-compose.yml"
HOOK = tfconfig.ROOT / "localstack" / "init" / "ready.d" / "create-queues.sh"

# The three awslocal calls the hook makes, done with boto3 (no AWS CLI here).
AWSLOCAL_SHIM = """
import json, os, sys
import boto3

args = sys.argv[1:]
assert args[0] == "sqs", args


def opt(name):
    return args[args.index(name) + 1] if name in args else None


def attributes():
    value = opt("--attributes")
    assert value.startswith("file://"), value
    with open(value[len("file://"):]) as f:
        return json.load(f)


sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL_SQS"])
if args[1] == "create-queue":
    assert opt("--query") == "QueueUrl"
    print(sqs.create_queue(QueueName=opt("--queue-name"), Attributes=attributes())["QueueUrl"])
elif args[1] == "get-queue-attributes":
    assert opt("--query") == "Attributes.QueueArn"
    resp = sqs.get_queue_attributes(QueueUrl=opt("--queue-url"), AttributeNames=[opt("--attribute-names")])
    print(resp["Attributes"]["QueueArn"])
elif args[1] == "set-queue-attributes":
    sqs.set_queue_attributes(QueueUrl=opt("--queue-url"), Attributes=attributes())
else:
    raise SystemExit("unexpected awslocal call: " + " ".join(args))
"""


@pytest.mark.unit
def test_compose_file_is_yaml_with_localstack_and_postgres() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    assert set(services) >= {"localstack", "postgres"}
    env = services["localstack"]["environment"]
    assert env["SERVICES"] == "sqs"
    assert env["SQS_ENDPOINT_STRATEGY"] == "path"
    assert env["LOCALSTACK_HOST"].endswith(":4566")
    volumes = " ".join(services["localstack"]["volumes"])
    assert "./init/ready.d:/etc/localstack/init/ready.d" in volumes
    assert "../app/settings/shared_settings.json:" + env["TASKLEASE_SHARED_SETTINGS"] in volumes
    # Same pin as the host-mode runner.
    pinned = (tfconfig.ROOT / "localstack" / "requirements.txt").read_text()
    version = services["localstack"]["image"].rsplit(":", 1)[1]
    assert f"localstack-core[runtime]=={version}" in pinned
    assert services["postgres"]["healthcheck"]["test"]


@pytest.mark.unit
def test_init_hook_is_executable_bash() -> None:
    assert os.access(HOOK, os.X_OK)
    subprocess.run(["bash", "-n", str(HOOK)], check=True)


@pytest.mark.integration
@pytest.mark.sqs_only  # LocalStack's init hook makes SQS queues (redrive policy, quotas)
def test_init_hook_creates_queues_with_the_terraform_values(
    aws_env: dict[str, str], sqs: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Given an awslocal that talks to the session's SQS server
    shim = tmp_path / "awslocal"
    shim.write_text(f"#!{sys.executable}\n{AWSLOCAL_SHIM}")
    shim.chmod(0o755)
    name = f"tl-hook-{uuid.uuid4().hex[:8]}"

    def run_hook() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(HOOK)],
            env={
                **os.environ,
                **aws_env,
                "AWSLOCAL": str(shim),
                "TASKLEASE_QUEUE_NAME": name,
                "TASKLEASE_SHARED_SETTINGS": str(tfconfig.SHARED_SETTINGS),
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    # When the hook runs
    proc = run_hook()
    assert proc.returncode == 0, proc.stderr

    # Then the queues carry app/settings/shared_settings.json's values, as infra/sqs.tf sets them
    shared = tfconfig.shared_settings()
    src = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    dlq = sqs.get_queue_url(QueueName=f"{name}-dlq")["QueueUrl"]
    src_attrs = sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["All"])["Attributes"]
    dlq_attrs = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
    assert int(src_attrs["VisibilityTimeout"]) == shared["visibility_timeout_seconds"]
    assert int(src_attrs["MessageRetentionPeriod"]) == shared["message_retention_seconds"]
    assert int(dlq_attrs["MessageRetentionPeriod"]) == shared["dlq_retention_seconds"]
    redrive = json.loads(src_attrs["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == dlq_attrs["QueueArn"]
    assert int(redrive["maxReceiveCount"]) == shared["max_receive_count"]
    if request.node.callspec.params.get("sqs_endpoint") == "moto":
        # moto's server does not implement RedriveAllowPolicy (LocalStack and AWS do);
        # `make test-localstack` checks it there.
        with pytest.raises(botocore.exceptions.ClientError, match="InvalidAttributeName"):
            sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["RedriveAllowPolicy"])
    else:
        allow_attr = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["RedriveAllowPolicy"])
        allow = json.loads(allow_attr["Attributes"]["RedriveAllowPolicy"])
        assert allow == {"redrivePermission": "byQueue", "sourceQueueArns": [src_attrs["QueueArn"]]}

    # And the Terraform sets the same attributes from the same locals
    source_tf = tfconfig.resources()[("aws_sqs_queue", "source")]
    assert (
        tfconfig.expr(source_tf["visibility_timeout_seconds"]) == "local.visibility_timeout_seconds"
    )
    assert source_tf["sqs_managed_sse_enabled"] is True
    assert f"TASKLEASE_QUEUE_URL={src}" in proc.stdout

    # And each priority has its pair, wired alike
    for p in ("high", "low"):
        p_src = sqs.get_queue_url(QueueName=f"{name}-{p}")["QueueUrl"]
        p_dlq = sqs.get_queue_url(QueueName=f"{name}-{p}-dlq")["QueueUrl"]
        p_attrs = sqs.get_queue_attributes(QueueUrl=p_src, AttributeNames=["All"])["Attributes"]
        p_dlq_arn = sqs.get_queue_attributes(QueueUrl=p_dlq, AttributeNames=["QueueArn"])
        assert (
            json.loads(p_attrs["RedrivePolicy"])["deadLetterTargetArn"]
            == (p_dlq_arn["Attributes"]["QueueArn"])
        )
        assert int(p_attrs["VisibilityTimeout"]) == shared["visibility_timeout_seconds"]
        assert f"TASKLEASE_QUEUE_URL_{p.upper()}={p_src}" in proc.stdout
        assert f"TASKLEASE_DLQ_URL_{p.upper()}={p_dlq}" in proc.stdout

    # And running it again changes nothing (LocalStack runs ready.d on every start)
    again = run_hook()
    assert again.returncode == 0, again.stderr
