#!/usr/bin/env bash
# Host-mode LocalStack (SQS only) runner: no Docker needed.
#
#   bash localstack/run.sh setup|start|stop|restart|status|endpoint
#
# Env: LOCALSTACK_PORT (4566), LOCALSTACK_VENV (<repo>/.localstack/venv),
#      LOCALSTACK_PYTHON (a python3.13 to build the venv with; found automatically),
#      LOCALSTACK_START_TIMEOUT (90 s), LOCALSTACK_STOP_TIMEOUT (20 s).
# See localstack/README.md.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
STATE_DIR="${REPO_ROOT}/.localstack"
VENV="${LOCALSTACK_VENV:-${STATE_DIR}/venv}"
PORT="${LOCALSTACK_PORT:-4566}"
HOST="127.0.0.1"
ENDPOINT="http://${HOST}:${PORT}"
REQ_FILE="${SCRIPT_DIR}/requirements.txt"
STAMP_FILE="${VENV}/.tasklease-requirements.sha256"
# uv where the Makefile found it (UV=...), else on PATH: it installs the requirements in
# well under a minute where pip took about two on this machine.
UV_BIN="${UV:-$(command -v uv 2>/dev/null || true)}"
[[ -n "${UV_BIN}" && -x "${UV_BIN}" ]] || UV_BIN=""
# The default port keeps the plain names; another port gets its own files so
# that several instances (e.g. parallel CI jobs) can share one checkout.
if [[ "${PORT}" == "4566" ]]; then INSTANCE=""; else INSTANCE="-${PORT}"; fi
LOG_FILE="${STATE_DIR}/localstack${INSTANCE}.log"
PID_FILE="${STATE_DIR}/localstack${INSTANCE}.pid"
FS_ROOT="${STATE_DIR}/filesystem${INSTANCE}"
START_TIMEOUT="${LOCALSTACK_START_TIMEOUT:-90}"
STOP_TIMEOUT="${LOCALSTACK_STOP_TIMEOUT:-20}"

log() { echo "[localstack] $*" >&2; }
die() { local rc="$1"; shift; log "ERROR: $*"; exit "$rc"; }

# ---------------------------------------------------------------- helpers

# Print the path of a working Python 3.13 interpreter, or return 1.
# Note: a pyenv shim named python3.13 may exist and still fail ("command not
# found") when 3.13 is installed but not the active pyenv version, so every
# candidate is actually executed.
find_python313() {
  local check='import sys; assert sys.version_info[:2] == (3, 13); print(sys.executable)'
  local cand out ver root
  if [[ -n "${LOCALSTACK_PYTHON:-}" ]]; then
    out="$("${LOCALSTACK_PYTHON}" -c "${check}" 2>/dev/null)" && { echo "${out}"; return 0; }
    log "LOCALSTACK_PYTHON=${LOCALSTACK_PYTHON} is not a working Python 3.13"
    return 1
  fi
  for cand in python3.13 python3; do
    if command -v "${cand}" >/dev/null 2>&1; then
      out="$("${cand}" -c "${check}" 2>/dev/null)" && { echo "${out}"; return 0; }
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    root="$(pyenv root 2>/dev/null || true)"
    ver="$(pyenv versions --bare 2>/dev/null | grep -E '^3\.13(\.[0-9]+)?$' | sort -V | tail -n1 || true)"
    if [[ -n "${root}" && -n "${ver}" && -x "${root}/versions/${ver}/bin/python3.13" ]]; then
      out="$("${root}/versions/${ver}/bin/python3.13" -c "${check}" 2>/dev/null)" && { echo "${out}"; return 0; }
    fi
  fi
  if [[ -n "${UV_BIN}" ]]; then
    # 'uv python find' only looks at installed interpreters, it never downloads.
    cand="$("${UV_BIN}" python find 3.13 2>/dev/null || true)"
    if [[ -n "${cand}" ]]; then
      out="$("${cand}" -c "${check}" 2>/dev/null)" && { echo "${out}"; return 0; }
    fi
  fi
  return 1
}

req_hash() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "${REQ_FILE}" | cut -d' ' -f1
  else
    shasum -a 256 "${REQ_FILE}" | cut -d' ' -f1
  fi
}

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

read_pid() {
  [[ -f "${PID_FILE}" ]] || return 1
  local pid
  pid="$(tr -dc '0-9' <"${PID_FILE}")"
  [[ -n "${pid}" ]] || return 1
  echo "${pid}"
}

# Is the pid really our LocalStack (guards against pid reuse)?
is_our_process() {
  local args
  args="$(ps -o args= -p "$1" 2>/dev/null || true)"
  [[ "${args}" == *localstack* ]]
}

# Exit 0 if /_localstack/health says sqs is running/available.
healthy() {
  [[ -x "${VENV}/bin/python" ]] || return 1
  "${VENV}/bin/python" - "${ENDPOINT}/_localstack/health" <<'PY' 2>/dev/null
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        state = json.load(r).get("services", {}).get("sqs")
except Exception:
    sys.exit(1)
sys.exit(0 if state in ("running", "available") else 1)
PY
}

port_in_use() {
  "${VENV}/bin/python" - "${HOST}" "${PORT}" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket()
s.settimeout(1)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
except OSError:
    sys.exit(1)
sys.exit(0)
PY
}

with_lock() {
  mkdir -p "${STATE_DIR}"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"${STATE_DIR}/.lock"
    flock -w 600 9 || die 1 "could not lock ${STATE_DIR}/.lock"
  fi
}

# --------------------------------------------------------------- commands

cmd_setup() {
  local want have="" py
  want="$(req_hash)"
  [[ -f "${STAMP_FILE}" ]] && have="$(cat "${STAMP_FILE}")"
  if [[ -x "${VENV}/bin/python" && "${have}" == "${want}" ]]; then
    log "venv up to date: ${VENV}"
    return 0
  fi

  if [[ ! -x "${VENV}/bin/python" ]]; then
    if ! py="$(find_python313)"; then
      log "Python 3.13 is required for localstack-core but was not found."
      log "Install it (e.g. 'pyenv install 3.13' or 'uv python install 3.13'),"
      log "or point LOCALSTACK_PYTHON at a python3.13 binary."
      exit 3
    fi
    log "creating venv ${VENV} with ${py}"
    mkdir -p "$(dirname "${VENV}")"
    if [[ -n "${UV_BIN}" ]]; then
      "${UV_BIN}" venv -q -p "${py}" "${VENV}"
    else
      "${py}" -m venv "${VENV}"
    fi
  fi
  "${VENV}/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null \
    || die 3 "${VENV} is not a Python 3.13 venv; remove it and re-run setup"

  log "installing ${REQ_FILE} into ${VENV}"
  rm -f "${STAMP_FILE}"
  if [[ -n "${UV_BIN}" ]]; then
    # With its bytecode, as pip writes it: LocalStack then starts without compiling.
    "${UV_BIN}" pip install -q --compile-bytecode --python "${VENV}/bin/python" -r "${REQ_FILE}"
  else
    "${VENV}/bin/python" -m pip install -q --disable-pip-version-check -r "${REQ_FILE}"
  fi
  "${VENV}/bin/python" -c 'import localstack.runtime.main' \
    || die 1 "localstack import failed after install"
  echo "${want}" >"${STAMP_FILE}"
  log "venv ready: ${VENV}"
}

cmd_start() {
  cmd_setup
  local pid
  if pid="$(read_pid)" && pid_alive "${pid}" && is_our_process "${pid}"; then
    if wait_healthy "${pid}" "${START_TIMEOUT}"; then
      log "already running (pid ${pid})"
      echo "${ENDPOINT}"
      return 0
    fi
    fail_start "running (pid ${pid}) but not healthy"
  fi
  rm -f "${PID_FILE}"

  if healthy; then
    log "a LocalStack not started by this script already serves ${ENDPOINT}; using it"
    echo "${ENDPOINT}"
    return 0
  fi
  if port_in_use; then
    die 1 "port ${HOST}:${PORT} is already in use by something else (set LOCALSTACK_PORT)"
  fi

  mkdir -p "${FS_ROOT}" "${STATE_DIR}/config"
  [[ -f "${LOG_FILE}" ]] && mv -f "${LOG_FILE}" "${LOG_FILE}.prev"

  log "starting LocalStack (sqs) on ${ENDPOINT}, log: ${LOG_FILE}"
  # New session/process group so that 'stop' can signal the whole tree.
  (
    exec 9>&- # do not hold the setup/start lock for LocalStack's lifetime
    cd "${STATE_DIR}"
    exec env \
      SERVICES=sqs \
      EAGER_SERVICE_LOADING=1 \
      GATEWAY_LISTEN="${HOST}:${PORT}" \
      LOCALSTACK_HOST="${HOST}:${PORT}" \
      SQS_ENDPOINT_STRATEGY=path \
      SQS_DISABLE_CLOUDWATCH_METRICS=1 \
      PERSISTENCE=0 \
      OVERRIDE_IN_DOCKER=0 \
      FILESYSTEM_ROOT="${FS_ROOT}" \
      CONFIG_DIR="${STATE_DIR}/config" \
      DNS_ADDRESS=0 \
      DISABLE_EVENTS=1 \
      SKIP_SSL_CERT_DOWNLOAD=1 \
      API_ENDPOINT="http://127.0.0.1:1/v1" \
      ANALYTICS_API="http://127.0.0.1:1/v1" \
      PYTHONUNBUFFERED=1 \
      "${VENV}/bin/python" -c \
      'import os, sys; os.setsid(); os.execv(sys.executable, [sys.executable, "-m", "localstack.runtime.main"])' \
      </dev/null >>"${LOG_FILE}" 2>&1
  ) &
  pid=$!
  echo "${pid}" >"${PID_FILE}"

  if wait_healthy "${pid}" "${START_TIMEOUT}"; then
    log "ready after ${SECONDS}s (pid ${pid})"
    echo "${ENDPOINT}"
    return 0
  fi
  fail_start "did not become healthy within ${START_TIMEOUT}s"
}

wait_healthy() { # pid timeout
  local pid="$1" deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    pid_alive "${pid}" || return 1
    healthy && return 0
    sleep 0.5
  done
  return 1
}

fail_start() {
  log "LocalStack failed to start: $*"
  if [[ -f "${LOG_FILE}" ]]; then
    log "---- last 40 lines of ${LOG_FILE} ----"
    tail -n 40 "${LOG_FILE}" >&2 || true
  fi
  do_stop >/dev/null 2>&1 || true
  exit 1
}

do_stop() {
  local pid
  if ! pid="$(read_pid)"; then
    log "not running (no pid file)"
    return 0
  fi
  if pid_alive "${pid}" && is_our_process "${pid}"; then
    log "stopping pid ${pid} (process group)"
    kill -TERM -- "-${pid}" 2>/dev/null || kill -TERM "${pid}" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while ((SECONDS < deadline)) && kill -0 -- "-${pid}" 2>/dev/null; do
      sleep 0.2
    done
    if kill -0 -- "-${pid}" 2>/dev/null; then
      log "still alive after ${STOP_TIMEOUT}s, sending KILL"
      kill -KILL -- "-${pid}" 2>/dev/null || true
      sleep 0.5
    fi
    log "stopped"
  else
    log "stale pid file (pid ${pid} not running)"
  fi
  rm -f "${PID_FILE}"
}

cmd_status() {
  local pid
  if pid="$(read_pid)" && pid_alive "${pid}" && is_our_process "${pid}"; then
    if healthy; then
      echo "running, healthy: ${ENDPOINT} (pid ${pid})"
      return 0
    fi
    echo "running (pid ${pid}) but NOT healthy: ${ENDPOINT}"
    return 1
  fi
  if healthy; then
    echo "healthy LocalStack at ${ENDPOINT}, not started by this script"
    return 0
  fi
  echo "not running"
  return 1
}

usage() {
  echo "usage: $0 {setup|start|stop|restart|status|endpoint|python313}" >&2
  exit 2
}

main() {
  [[ $# -ge 1 ]] || usage
  case "$1" in
    setup) with_lock; cmd_setup ;;
    start) with_lock; cmd_start ;;
    stop) with_lock; do_stop ;;
    restart) with_lock; do_stop; cmd_start ;;
    status) cmd_status ;;
    endpoint) echo "${ENDPOINT}" ;;
    python313) find_python313 || { log "no working Python 3.13 found"; exit 3; } ;;
    *) usage ;;
  esac
}

main "$@"
