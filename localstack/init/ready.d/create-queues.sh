#!/usr/bin/env bash
# LocalStack init hook (ready.d): create the tasklease queues with the values the
# Terraform uses, read from app/settings/shared_settings.json (mounted by docker-compose.yml).
#
# Same shape as infra/sqs.tf and app/transport/sqs_create.py: per priority (NAME,
# NAME-high, NAME-low) a DLQ, a source queue whose redrive policy points at it, and a
# redrive allow policy (byQueue) on the DLQ.
# Idempotent: CreateQueue with the same attributes returns the existing queue.
#
# Env: TASKLEASE_SHARED_SETTINGS (/etc/tasklease/shared_settings.json),
#      TASKLEASE_QUEUE_NAME (tasklease-jobs), AWSLOCAL (awslocal).
set -euo pipefail

SETTINGS="${TASKLEASE_SHARED_SETTINGS:-/etc/tasklease/shared_settings.json}"
NAME="${TASKLEASE_QUEUE_NAME:-tasklease-jobs}"
AWSLOCAL="${AWSLOCAL:-awslocal}"
[[ -r "${SETTINGS}" ]] || { echo "create-queues: ${SETTINGS} not found (is app/ mounted?)" >&2; exit 1; }

# setting KEY: one value of the JSON file.
setting() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "${SETTINGS}" "$1"
}
VISIBILITY="$(setting visibility_timeout_seconds)"
RETENTION="$(setting message_retention_seconds)"
DLQ_RETENTION="$(setting dlq_retention_seconds)"
MAX_RECEIVE_COUNT="$(setting max_receive_count)"

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

# make_pair NAME SUFFIX: the source queue NAME and its DLQ NAME-dlq, printed as
# TASKLEASE_QUEUE_URL<SUFFIX> and TASKLEASE_DLQ_URL<SUFFIX>.
make_pair() {
  local name="$1" suffix="$2"
# Attribute maps are written as JSON files: the redrive policies are JSON inside
# JSON, which the CLI's shorthand syntax cannot carry.
python3 - "${tmp}/dlq.json" "${DLQ_RETENTION}" <<'PY'
import json, sys
json.dump({"MessageRetentionPeriod": sys.argv[2], "SqsManagedSseEnabled": "true"}, open(sys.argv[1], "w"))
PY
dlq_url="$("${AWSLOCAL}" sqs create-queue --queue-name "${name}-dlq" \
  --attributes "file://${tmp}/dlq.json" --query QueueUrl --output text)"
dlq_arn="$("${AWSLOCAL}" sqs get-queue-attributes --queue-url "${dlq_url}" \
  --attribute-names QueueArn --query Attributes.QueueArn --output text)"

python3 - "${tmp}/source.json" "${VISIBILITY}" "${RETENTION}" "${dlq_arn}" "${MAX_RECEIVE_COUNT}" <<'PY'
import json, sys
path, visibility, retention, dlq_arn, max_receive = sys.argv[1:]
json.dump(
    {
        "VisibilityTimeout": visibility,
        "MessageRetentionPeriod": retention,
        "ReceiveMessageWaitTimeSeconds": "20",
        "SqsManagedSseEnabled": "true",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": int(max_receive)}),
    },
    open(path, "w"),
)
PY
src_url="$("${AWSLOCAL}" sqs create-queue --queue-name "${name}" \
  --attributes "file://${tmp}/source.json" --query QueueUrl --output text)"
src_arn="$("${AWSLOCAL}" sqs get-queue-attributes --queue-url "${src_url}" \
  --attribute-names QueueArn --query Attributes.QueueArn --output text)"

python3 - "${tmp}/allow.json" "${src_arn}" <<'PY'
import json, sys
policy = {"redrivePermission": "byQueue", "sourceQueueArns": [sys.argv[2]]}
json.dump({"RedriveAllowPolicy": json.dumps(policy)}, open(sys.argv[1], "w"))
PY
"${AWSLOCAL}" sqs set-queue-attributes --queue-url "${dlq_url}" --attributes "file://${tmp}/allow.json"

echo "create-queues: TASKLEASE_QUEUE_URL${suffix}=${src_url}"
echo "create-queues: TASKLEASE_DLQ_URL${suffix}=${dlq_url}"
}

# One pair per priority, as app/transport/sqs_create.py and infra/sqs.tf make them.
make_pair "${NAME}" ""
make_pair "${NAME}-high" "_HIGH"
make_pair "${NAME}-low" "_LOW"
echo "create-queues: visibility ${VISIBILITY}s, maxReceiveCount ${MAX_RECEIVE_COUNT}, retention ${RETENTION}s / DLQ ${DLQ_RETENTION}s"
