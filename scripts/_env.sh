# shellcheck shell=bash
# Sourced (never executed) by scripts/test.sh and scripts/demo.sh.
#
# Creates or reuses the project's virtual environment in <repo>/.venv on a machine
# that has only python3 (3.10+), then exports what the tests and the demo need:
# PATH (.venv/bin first), SPARK_HOME, SPARK_LOCAL_IP, JAVA_HOME, PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON.
#
# Knobs (environment):
#   ROCKETMQ_PYTHON=/path/python  interpreter for a new venv (default: python3.11, else python3)
#   ROCKETMQ_ENV_NO_INSTALL=1     never create/install; only export (the venv must exist)
#   ROCKETMQ_ENV_FORCE=1          reinstall even when the stamp says the venv is up to date
#
# Why pyspark is reinstalled last: apache-airflow-providers-apache-spark depends on
# `pyspark-client`, a Spark Connect-only distribution that unpacks into the same
# `pyspark/` package directory and overwrites part of the full `pyspark`. After that
# `spark-submit` no longer finds its home (bin/spark-class, jars/). Reinstalling
# `pyspark` after everything else restores its files, and SPARK_HOME pointing at the
# package directory makes the venv's `spark-submit` use them.

_rmq_log() { printf '_env.sh: %s\n' "$*" >&2; }
_rmq_die() { _rmq_log "error: $*"; return 1; }

_rmq_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_rmq_venv="${_rmq_root}/.venv"
_rmq_extras=".[airflow,spark,compression,iceberg-test,test]"

_rmq_pick_python() {
    local cand
    if [ -n "${ROCKETMQ_PYTHON:-}" ]; then
        echo "${ROCKETMQ_PYTHON}"; return 0
    fi
    for cand in python3.11 python3.12 python3 python3.13 python3.10; do
        if command -v "$cand" >/dev/null 2>&1 &&
           "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
            command -v "$cand"; return 0
        fi
    done
    return 1
}

_rmq_stamp_value() {
    # hash of what decides the venv's content; the interpreter version is part of it
    {
        cat "${_rmq_root}/pyproject.toml" "${_rmq_root}/scripts/_env.sh"
        "${_rmq_venv}/bin/python" -c 'import sys; print(sys.version)' 2>/dev/null || true
    } | sha256sum | cut -d' ' -f1
}

# Prints the command prefix for uv (`uv`, `python -m uv` or a bootstrapped binary), or nothing.
_rmq_find_uv() {
    local py="$1" boot="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-rocketmq/uv-bootstrap"
    if command -v uv >/dev/null 2>&1 && uv --version >/dev/null 2>&1; then
        echo "uv"; return 0
    fi
    if "$py" -m uv --version >/dev/null 2>&1; then
        echo "$py -m uv"; return 0
    fi
    if [ -x "$boot/bin/uv" ] && "$boot/bin/uv" --version >/dev/null 2>&1; then
        echo "$boot/bin/uv"; return 0
    fi
    _rmq_log "bootstrapping uv into $boot"
    if "$py" -m pip install --quiet --disable-pip-version-check --target "$boot" uv >/dev/null 2>&1 &&
       [ -x "$boot/bin/uv" ]; then
        echo "$boot/bin/uv"; return 0
    fi
    return 1  # caller falls back to plain pip
}

_rmq_ensure_java() {
    if command -v java >/dev/null 2>&1; then
        return 0
    fi
    _rmq_log "java not found; installing openjdk-17-jre-headless (Spark needs a JVM)"
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 && sudo="sudo -n" || { _rmq_die "java missing and not root: install a JDK/JRE 17"; return 1; }
    fi
    command -v apt-get >/dev/null 2>&1 || { _rmq_die "java missing and no apt-get: install a JDK/JRE 17"; return 1; }
    DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq </dev/null >&2 &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
            openjdk-17-jre-headless </dev/null >&2 ||
        { _rmq_die "apt-get could not install openjdk-17-jre-headless"; return 1; }
}

_rmq_install() {
    local py uv
    py="$(_rmq_pick_python)" || { _rmq_die "need python3.10+ (set ROCKETMQ_PYTHON)"; return 1; }
    uv="$(_rmq_find_uv "$py")" || uv=""
    if [ ! -x "${_rmq_venv}/bin/python" ]; then
        _rmq_log "creating ${_rmq_venv} with $py"
        if [ -n "$uv" ]; then
            # --seed puts pip in the venv too, so the pip fallback works later on
            $uv venv --quiet --seed --python "$py" "${_rmq_venv}" >&2 || return 1
        else
            "$py" -m venv "${_rmq_venv}" >&2 || { _rmq_die "python -m venv failed (Debian: apt-get install python3-venv)"; return 1; }
        fi
    fi
    cd "${_rmq_root}" || return 1
    _rmq_check_disk
    _rmq_log "installing the project with ${_rmq_extras} (${uv:-pip})"
    if [ -n "$uv" ]; then
        $uv pip install --quiet --python "${_rmq_venv}/bin/python" -e "${_rmq_extras}" >&2 || return 1
    else
        "${_rmq_venv}/bin/python" -m pip install --quiet --disable-pip-version-check -e "${_rmq_extras}" >&2 || return 1
    fi
    _rmq_repair_pyspark "${_rmq_venv}" "$uv" || return 1
    _rmq_compile "${_rmq_venv}"
}

# Bytecode for every module the venv imports, as `pip install` leaves an installed package (uv does
# not compile; PYTHONDONTWRITEBYTECODE, set by test.sh and by some shells, stops Python caching it
# on first import): otherwise every process - each spark-submit, each Spark Python worker, each
# airflow command - compiles pyspark, pyarrow, numpy, airflow and this package from source again
# (~1 CPU-s per Spark worker, a third of a 1M-row load task's CPU). Stale files are harmless: Python
# compares each with its source's mtime. $1 = venv directory.
_rmq_compile() {
    local venv="$1" site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || return 1
    _rmq_log "compiling bytecode (site-packages and the project's package)"
    "$venv/bin/python" -m compileall -q -j 0 "$site" "${_rmq_root}/airflow_provider_rocketmq" >/dev/null 2>&1 ||
        _rmq_log "warning: some files did not compile (they compile on import instead)"
}

# Reinstall the full pyspark (same version, no deps) over whatever pyspark-client overwrote.
# $1 = venv directory, $2 = uv command prefix or empty for pip. Also called by tests/spark.
# Uninstall + install rather than uv's --reinstall-package: that flag implies a cache refresh,
# which rebuilds pyspark's 450 MB sdist each time and leaves ~1.4 GB more in uv's cache per run
# (a full disk broke CI). A plain install takes the wheel built the first time.
_rmq_repair_pyspark() {
    local venv="$1" uv="${2:-}" ver
    ver="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("pyspark"))')" ||
        { _rmq_die "pyspark is not installed in $venv"; return 1; }
    _rmq_log "reinstalling pyspark==${ver} last (pyspark-client shares its package directory)"
    if [ -n "$uv" ]; then
        $uv pip uninstall --quiet --python "$venv/bin/python" pyspark >&2 &&
            $uv pip install --quiet --python "$venv/bin/python" --no-deps "pyspark==${ver}" >&2
    else
        # pip's --force-reinstall takes the wheel from pip's own cache, built once
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
            --no-deps "pyspark==${ver}" >&2
    fi
}

# Building pyspark's wheel from its sdist needs about 2.5 GB at peak (sdist, build tree, wheel,
# unpacked copy); say so up front instead of failing half-way with ENOSPC.
_rmq_check_disk() {
    local dir free_kb need_kb=$((3 * 1024 * 1024))
    command -v df >/dev/null 2>&1 && command -v awk >/dev/null 2>&1 || return 0
    for dir in "${_rmq_root}" "${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}}"; do
        [ -d "$dir" ] || dir="$(dirname "$dir")"
        free_kb="$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 {print $4}')" || continue
        [ -n "$free_kb" ] && [ "$free_kb" -lt "$need_kb" ] &&
            _rmq_log "warning: only $((free_kb / 1024)) MiB free under $dir; building pyspark needs about 2.5 GB (free space or set UV_CACHE_DIR)"
    done
    return 0
}

_rmq_setup() {
    local stamp_file="${_rmq_venv}/.rocketmq-env-stamp" want have="" lock_fd
    if [ "${ROCKETMQ_ENV_NO_INSTALL:-0}" != 1 ]; then
        _rmq_ensure_java || return 1
        # one installer at a time when several shells source this together (lock kept out of the tree)
        if command -v flock >/dev/null 2>&1; then
            exec {lock_fd}>"${TMPDIR:-/tmp}/rocketmq-env-$(printf %s "${_rmq_root}" | sha256sum | cut -c1-16).lock"
            flock "$lock_fd"
        fi
        want="$(_rmq_stamp_value)"
        [ -f "$stamp_file" ] && have="$(cat "$stamp_file")"
        if [ "$want" != "$have" ] || [ "${ROCKETMQ_ENV_FORCE:-0}" = 1 ] || [ ! -x "${_rmq_venv}/bin/python" ]; then
            local t0=$SECONDS
            ( _rmq_install ) || { [ -n "${lock_fd:-}" ] && exec {lock_fd}>&-; _rmq_die "environment set-up failed"; return 1; }
            _rmq_stamp_value >"$stamp_file"
            _rmq_log "environment ready in $((SECONDS - t0)) s"
        fi
        [ -n "${lock_fd:-}" ] && exec {lock_fd}>&-
    fi
    [ -x "${_rmq_venv}/bin/python" ] || { _rmq_die "no virtual environment at ${_rmq_venv}"; return 1; }

    export VIRTUAL_ENV="${_rmq_venv}"
    case ":${PATH}:" in
        *":${_rmq_venv}/bin:"*) ;;
        *) export PATH="${_rmq_venv}/bin:${PATH}" ;;
    esac
    export PYSPARK_PYTHON="${_rmq_venv}/bin/python"
    export PYSPARK_DRIVER_PYTHON="${_rmq_venv}/bin/python"
    SPARK_HOME="$("${_rmq_venv}/bin/python" -c 'import os, pyspark; print(os.path.dirname(os.path.realpath(pyspark.__file__)))')" ||
        { _rmq_die "pyspark not importable from ${_rmq_venv}"; return 1; }
    export SPARK_HOME
    # local-mode Spark (tests, demo) binds to loopback instead of guessing an interface
    export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
    [ -x "${SPARK_HOME}/bin/spark-class" ] && [ -d "${SPARK_HOME}/jars" ] ||
        _rmq_log "warning: ${SPARK_HOME} lacks bin/spark-class or jars/ (pyspark-client overwrote pyspark?); rerun with ROCKETMQ_ENV_FORCE=1"
    if [ -z "${JAVA_HOME:-}" ] && command -v java >/dev/null 2>&1; then
        JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
        export JAVA_HOME
    fi
    return 0
}

_rmq_setup
