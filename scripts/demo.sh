#!/usr/bin/env bash
# The README's first command. On a fresh machine (python3 only) it:
#   1. creates/updates .venv (scripts/_env.sh),
#   2. starts the embedded RocketMQ broker (`rocketmq-airflow broker`) in the background,
#   3. produces sample messages,
#   4. runs the example DAG dags/rocketmq_window_to_spark.py with `airflow dags test`
#      (lag sensor -> window -> spark-submit local[*] -> commit) in a throw-away AIRFLOW_HOME,
#   5. prints exactly one final line `demo: produced=N loaded=N lag=0` (real counts: rows in
#      the Spark output, lag from the admin API) and stops the broker.
# Knobs: ROCKETMQ_DEMO_MESSAGES (default 1000), ROCKETMQ_DEMO_KEEP=1 keeps the work directory.
# Exit status: 0 when loaded == produced and lag == 0.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$(pwd)"
# shellcheck source=scripts/_env.sh
source scripts/_env.sh || exit 1

produced_target="${ROCKETMQ_DEMO_MESSAGES:-1000}"
topic="demo_orders"
group="demo_window_loader"
work="$(mktemp -d "${TMPDIR:-/tmp}/rocketmq-demo.XXXXXX")"
broker_pid=""

log() { printf 'demo.sh: %s\n' "$*" >&2; }
cleanup() {
    if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
        kill "$broker_pid" 2>/dev/null || true
        wait "$broker_pid" 2>/dev/null || true
    fi
    if [ -z "${ROCKETMQ_DEMO_KEEP:-}" ]; then
        rm -rf "$work"
    else
        log "kept $work"
    fi
}
trap cleanup EXIT
fail() {
    log "error: $*"
    for f in "$work"/*.log; do
        [ -f "$f" ] && { log "--- tail of $f"; tail -n 25 "$f" >&2; }
    done
    exit 1
}

# -- 1. embedded broker on free ports ----------------------------------------------------------
log "starting the embedded broker"
rocketmq-airflow broker --port 0 >"$work/broker.out" 2>"$work/broker.log" &
broker_pid=$!
namesrv=""
for _ in $(seq 1 300); do  # up to 30 s: the broker prints namesrv=host:port once it listens
    namesrv="$(sed -n 's/^namesrv=//p' "$work/broker.out" 2>/dev/null | head -n 1)"
    [ -n "$namesrv" ] && break
    kill -0 "$broker_pid" 2>/dev/null || fail "the broker exited"
    sleep 0.1
done
[ -n "$namesrv" ] || fail "the broker did not start within 30 s"
log "name server at $namesrv"

# -- 2. sample messages ------------------------------------------------------------------------
produced="$(rocketmq-airflow produce --namesrv "$namesrv" --topic "$topic" --count "$produced_target" \
    --batch 50 --tag demo --json 2>"$work/produce.log" |
    python -c 'import json, sys; print(json.load(sys.stdin)["sent"])')" || fail "producing failed"
log "produced $produced messages to $topic"

# -- 3. the example DAG through `airflow dags test` -------------------------------------------
export AIRFLOW_HOME="$work/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$repo/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW_CONN_ROCKETMQ_DEFAULT="{\"conn_type\": \"rocketmq\", \"host\": \"$namesrv\"}"
export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'
export ROCKETMQ_DEMO_TOPIC="$topic" ROCKETMQ_DEMO_GROUP="$group"
export ROCKETMQ_DEMO_OUTPUT="$work/output"
# where windows are staged ([rocketmq] staging_path): the window task fails without one
export AIRFLOW__ROCKETMQ__STAGING_PATH="$work/staging"

log "airflow db migrate (AIRFLOW_HOME=$AIRFLOW_HOME)"
airflow db migrate >"$work/airflow-db.log" 2>&1 || fail "airflow db migrate failed"
log "airflow dags test rocketmq_window_to_spark (sensor -> window -> spark-submit -> commit)"
airflow dags test rocketmq_window_to_spark >"$work/dags-test.log" 2>&1 || fail "airflow dags test failed"

# -- 4. real counts: rows in the Spark output, lag from the admin API -------------------------
grep -ho 'load_window: windows=[0-9]*[ a-z_=0-9]*' "$work/dags-test.log" | head -n 1 | sed 's/ *$//; s/^/demo.sh: spark /' >&2 || true
read -r loaded lag < <(python - "$work/output" "$namesrv" "$group" "$topic" <<'EOF'
import sys

import pyarrow.dataset as ds

from airflow_provider_rocketmq.client import Admin, ClientConfig

output, namesrv, group, topic = sys.argv[1:5]
try:
    dataset = ds.dataset(output, format="parquet", partitioning="hive")
    rows = dataset.count_rows()
except (FileNotFoundError, ValueError):
    dataset, rows = None, 0
if rows:  # show what was loaded (stderr: stdout carries the counts)
    table = dataset.head(3, columns=["window_id", "broker", "queue_id", "queue_offset", "tags", "body"])
    for r in table.to_pylist():
        body = r["body"] if isinstance(r["body"], str) else repr(r["body"])
        print(f"demo.sh: loaded row window={r['window_id']} {r['broker']}/{r['queue_id']}@{r['queue_offset']} "
              f"tags={r['tags']} body={body[:60]}", file=sys.stderr)
with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
    lag = admin.lag(group, topic).total_lag
print(rows, lag)
EOF
) || fail "counting failed"

echo "demo: produced=$produced loaded=$loaded lag=$lag"
[ "$produced" = "$loaded" ] && [ "$lag" = "0" ]
