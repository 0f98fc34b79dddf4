#!/usr/bin/env bash
# Runs the whole test suite (unit/component tests and the integration suite against the
# embedded broker). Creates/reuses .venv through scripts/_env.sh. Extra arguments go to pytest;
# when one of them is a test path (`bash scripts/test.sh integration/ -q`), only the paths given run.
# Without arguments (what CI runs) it then runs scripts/compat.sh: the Airflow tests on the
# lowest supported Airflow, in .venv-compat. ROCKETMQ_COMPAT=0 skips that, =1 forces it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_env.sh
source scripts/_env.sh || exit 1

# The integration suite talks to the in-process embedded broker, whatever else runs on the machine
# (an explicit ROCKETMQ_EMBEDDED=1 wins over a Docker engine that answers), unless the caller chose
# another backend: ROCKETMQ_NAMESRV (an existing broker) or ROCKETMQ_DOCKER=1 (testcontainers).
if [ -z "${ROCKETMQ_NAMESRV:-}" ] && [ "${ROCKETMQ_DOCKER:-}" != 1 ]; then
    export ROCKETMQ_EMBEDDED="${ROCKETMQ_EMBEDDED:-1}"
fi
export PYTHONDONTWRITEBYTECODE=1

paths=(tests)
[ -d integration ] && paths+=(integration)
# a path among the arguments (not the value of an option such as -k or -m) replaces the defaults
prev=""
for arg in "$@"; do
    case "$prev" in -k|-m|-p|-o|-c|-W|--deselect|--ignore|--ignore-glob|--rootdir|--basetemp|--timeout|\
        --durations|--maxfail|--confcutdir) prev=""; continue ;; esac
    prev=$arg
    case "$arg" in -*) continue ;; esac
    if [ -e "${arg%%::*}" ]; then paths=(); break; fi
done

start=$SECONDS
set +e
python -m pytest ${paths[@]+"${paths[@]}"} -p no:cacheprovider --timeout="${ROCKETMQ_TEST_TIMEOUT:-300}" \
    -q -rfEs --durations=15 "$@" </dev/null
rc=$?
set -e
elapsed=$((SECONDS - start))
if [ "$rc" -eq 5 ]; then
    echo "test.sh: FAILED: pytest collected no tests" >&2
    exit 1
fi
echo "test.sh: pytest exit code ${rc} after ${elapsed} s"

compat_rc=0
if [ "${ROCKETMQ_COMPAT:-$([ "$#" -eq 0 ] && echo 1 || echo 0)}" = 1 ]; then
    set +e
    bash scripts/compat.sh
    compat_rc=$?
    set -e
    echo "test.sh: compatibility run (lowest supported Airflow) exit code ${compat_rc}; total $((SECONDS - start)) s"
fi
[ "$rc" -ne 0 ] && exit "$rc"
exit "$compat_rc"
