#!/usr/bin/env bash
# checkov over infra/, from its own virtualenv (.tools/checkov-venv).
#
# checkov pins a large tree of its own (boto3, networkx, pydantic, ...) that would
# fight the app's lock, so it never goes into uv.lock: the version is pinned here,
# and the venv is rebuilt only when that pin changes.
#
#   bash scripts/checkov.sh [extra checkov args]
set -euo pipefail
cd "$(dirname "$0")/.."

CHECKOV_VERSION="3.3.30"
VENV="${CHECKOV_VENV:-.tools/checkov-venv}"
STAMP="${VENV}/.checkov-${CHECKOV_VERSION}"
UV="${UV:-uv}"

if [[ ! -f "${STAMP}" ]]; then
  echo "checkov: installing checkov==${CHECKOV_VERSION} into ${VENV}" >&2
  rm -rf "${VENV}"
  "${UV}" venv -q -p 3.11 "${VENV}"
  "${UV}" pip install -q --python "${VENV}/bin/python" "checkov==${CHECKOV_VERSION}"
  touch "${STAMP}"
fi

# --quiet prints only failed checks; the summary line is always printed.
# Every skip is inline in the .tf files as `#checkov:skip=CKV_...:reason`, so a
# skip without a reason, or a new failure, is seen here and in review.
exec "${VENV}/bin/checkov" --directory infra --framework terraform \
  --download-external-modules false --skip-download --compact --quiet "$@"
