#!/usr/bin/env bash
# The whole suite, run as README.md runs it, while every core is kept busy by a bounded
# background load of this script's own: a flaky test shows up here before a submission.
# The deadlines are stretched as .ci/run stretches them (DURABLY_TEST_SLOWNESS=3 unless
# set). Extra arguments go to pytest, e.g. `bash tests/stress-ci.sh tests/acceptance -x`.
set -euo pipefail
cd "$(dirname "$0")/.."

load=()
stop_load() {
  # Each busy loop runs under `timeout`, which passes the TERM on; the bound of 30 min
  # ends them even if this script is killed before it can. --foreground keeps them in
  # this script's process group, so a Ctrl-C reaches them at once too.
  for pid in "${load[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait "${load[@]}" 2>/dev/null || true
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for _ in $(seq "$(nproc)"); do
  timeout --foreground 1800 sh -c 'while :; do :; done' &
  load+=($!)
done
echo "stress-ci: ${#load[@]} busy loops (pids ${load[*]}), DURABLY_TEST_SLOWNESS=${DURABLY_TEST_SLOWNESS:-3}"

export DURABLY_TEST_SLOWNESS="${DURABLY_TEST_SLOWNESS:-3}"
uv run pytest "$@"
