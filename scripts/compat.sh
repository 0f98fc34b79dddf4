#!/usr/bin/env bash
# Compatibility run: the provider on the LOWEST versions it declares.
#
# Builds <repo>/.venv-compat (uv and its cache, like scripts/_env.sh) with every `>=` floor of
# the `airflow` and `openlineage` extras pinned to exactly that floor (apache-airflow 3.0.1,
# common-messaging 2.0.0, pyarrow 16.0.0, ...), the rest of the resolution fixed by
# scripts/compat-constraints.txt, then
#   1. checks that `airflow providers list` and `airflow providers hooks` show the provider
#      with no import error;
#   2. runs the Airflow tests that need no Spark (tests/airflow -m "not spark") and
#      tests/test_packaging.py.
# Spark is not installed here: the `spark` extra's floors are not exercised by this run.
#
# Usage: bash scripts/compat.sh [pytest args]
#        bash scripts/compat.sh --refresh-constraints   # re-resolve and rewrite the constraints file
# Knobs: ROCKETMQ_PYTHON (interpreter), ROCKETMQ_COMPAT_VENV (default <repo>/.venv-compat).
#
# Why a constraints file: Airflow 3.0.x is released with a constraints file that pins its
# whole dependency tree; resolved freely today, newer releases of its dependencies can break it.
# compat-constraints.txt records a resolution of the floors that installs and passes here, so
# the run does not change under us; refresh it deliberately and re-run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"
start=$SECONDS

# the helpers of _env.sh (python and uv discovery) without building or requiring the main .venv
# shellcheck source=scripts/_env.sh
ROCKETMQ_ENV_NO_INSTALL=1 source scripts/_env.sh >/dev/null 2>&1 || true
log() { printf 'compat.sh: %s\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

venv="${ROCKETMQ_COMPAT_VENV:-${root}/.venv-compat}"
constraints="${root}/scripts/compat-constraints.txt"
extras="airflow,openlineage,test"
py="$(_rmq_pick_python)" || die "need python3.10+ (set ROCKETMQ_PYTHON)"
uv="$(_rmq_find_uv "$py")" || die "uv is needed (pip cannot resolve Airflow 3.0.x in reasonable time)"

refresh=0
if [ "${1:-}" = "--refresh-constraints" ]; then
    refresh=1; shift
fi

# every `name>=X` of the extras above, as `name==X`
floors="$("$py" - "$extras" <<'PY'
import re, sys
try:
    import tomllib
    extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
except ImportError:  # Python 3.10: each extra is `name = [` ... `]`, one quoted requirement per line or inline
    extras, name = {}, None
    section = open("pyproject.toml").read().split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    for line in section.splitlines():
        code = line.split("#", 1)[0]
        start = re.match(r"\s*([\w-]+)\s*=\s*\[", code)
        if start:
            name, code = start[1], code[start.end():]
            extras[name] = []
        if name:
            extras[name] += re.findall(r'"([^"]+)"', code)
            if code.rstrip().endswith("]"):
                name = None
for extra in sys.argv[1].split(","):
    if extra == "test":
        continue  # the test tools are not part of what users get
    for req in extras[extra]:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)\s*", req)
        if m:
            print(f"{m[1]}=={m[2]}")
PY
)"
floors_file="$(mktemp)"
trap 'rm -f "$floors_file"' EXIT
printf '%s\n' "$floors" >"$floors_file"
log "floors: $(tr '\n' ' ' <"$floors_file")"

if [ ! -x "${venv}/bin/python" ]; then
    $uv venv --quiet --python "$py" "$venv" >&2
fi
if [ "$refresh" = 1 ] || [ ! -f "$constraints" ]; then
    log "resolving the floors afresh into ${constraints#"$root"/}"
    $uv pip install --quiet --python "${venv}/bin/python" --constraint "$floors_file" -e ".[${extras}]" >&2
    {
        echo "# Written by scripts/compat.sh --refresh-constraints: the resolution the compatibility run"
        echo "# installs (the floors of pyproject.toml's airflow/openlineage extras and what they pulled in)."
        $uv pip freeze --python "${venv}/bin/python" --exclude-editable
    } >"$constraints"
else
    if ! $uv pip install --quiet --python "${venv}/bin/python" --constraint "$floors_file" \
            --constraint "$constraints" -e ".[${extras}]" >&2; then
        # a floor changed in pyproject.toml since the file was written: still test the floors,
        # resolving the rest freely, and say how to record the new resolution
        log "WARNING: the floors do not install with ${constraints#"$root"/} (a floor changed?);" \
            "resolving without it. Record the new resolution: bash scripts/compat.sh --refresh-constraints"
        $uv pip install --quiet --python "${venv}/bin/python" --constraint "$floors_file" -e ".[${extras}]" >&2 ||
            die "the floors of pyproject.toml cannot be installed together (see uv's explanation above)"
    fi
fi
_rmq_compile "$venv"  # bytecode once (uv writes none; PYTHONDONTWRITEBYTECODE below stops lazy caching)
log "installed in $((SECONDS - start)) s: $("${venv}/bin/python" -c 'import importlib.metadata as m
print(" ".join(f"{d}=={m.version(d)}" for d in ("apache-airflow", "apache-airflow-providers-common-messaging",
      "apache-airflow-providers-openlineage", "pyarrow")))')"

export VIRTUAL_ENV="$venv" PATH="${venv}/bin:${PATH}" PYTHONDONTWRITEBYTECODE=1
unset SPARK_HOME PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON
home="$(mktemp -d -t rmq-compat-home-XXXXXX)"
trap 'rm -f "$floors_file"; rm -rf "$home"' EXIT
export AIRFLOW_HOME="$home" AIRFLOW__CORE__LOAD_EXAMPLES=False

# 1. the provider as `airflow providers` sees it, with no import error
for cmd in list hooks; do
    out="$("${venv}/bin/airflow" providers "$cmd" --output json 2>&1)" || die "airflow providers $cmd: $out"
    if grep -E "ImportError|ModuleNotFoundError|cannot import|Exception when importing" <<<"$out" >&2; then
        die "airflow providers $cmd reports an import error (above)"
    fi
    grep -q "airflow-provider-rocketmq" <<<"$out" || die "airflow providers $cmd does not list the provider"
done
grep -q '"airflow_provider_rocketmq.hooks.rocketmq.RocketMQHook"' <<<"$out" ||
    die "airflow providers hooks does not show RocketMQHook"
log "airflow providers list / hooks: provider and RocketMQHook present, no import error"

# 2. the Airflow tests that need no Spark
set +e
# the Airflow layer's tests (the package's folders mirrored under tests/) and the packaging checks
airflow_tests=(tests/assets tests/dags tests/hooks tests/operators tests/queues tests/sensors tests/triggers
               tests/test_metrics.py tests/test_provider_info.py tests/test_packaging.py)
"${venv}/bin/python" -m pytest "${airflow_tests[@]}" -m "not spark" -p no:cacheprovider \
    --timeout="${ROCKETMQ_TEST_TIMEOUT:-300}" -q -rfEs "$@" </dev/null
rc=$?
set -e
log "pytest exit code ${rc}; compatibility run took $((SECONDS - start)) s"
exit "$rc"
