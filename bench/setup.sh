#!/usr/bin/env bash
# Creates bench/.venv for bench/compare.py: the launchers npulaunch is compared with.
# The venv sees the system site-packages, so npulaunch (installed editable in python3) is importable.
# torch is pinned to 2.13.0: on the project's machines that pin takes the local CPU wheel; any
# other spec pulls the newest build with several GB of CUDA packages. MindSpore (for msrun) is an
# 804 MB wheel, 2.6 GB installed: skip it with --without-mindspore. Idempotent: skips what is there.
# Usage: bash bench/setup.sh [--without-mindspore]
set -euo pipefail

with_mindspore=1
for arg in "$@"; do
    case "$arg" in
        --without-mindspore) with_mindspore=0 ;;
        *) echo "usage: bash bench/setup.sh [--without-mindspore] (unknown: $arg)" >&2; exit 2 ;;
    esac
done

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
py="$venv/bin/python"

if [ -x "$py" ]; then
    echo "venv: $venv already there"
else
    echo "venv: creating $venv (--system-site-packages)"
    python3 -m venv --system-site-packages "$venv"
fi

# version DIST: the installed version as the venv's python sees it (no import: mindspore takes seconds)
version() {
    "$py" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null || true
}

install() {  # install DIST PIP_SPEC [VERSION]
    local dist="$1" spec="$2" want="${3:-}" have
    have="$(version "$dist")"
    if [ -n "$have" ] && { [ -z "$want" ] || [ "${have%%+*}" = "$want" ]; }; then
        echo "$spec: already installed ($have)"
    else
        echo "$spec: installing"
        local start=$SECONDS
        "$py" -m pip install --quiet "$spec"
        echo "$spec: installed ($(version "$dist")) in $((SECONDS - start)) s"
    fi
}

install torch "torch==2.13.0" "2.13.0"
install matplotlib matplotlib
install psutil psutil
if [ "$with_mindspore" = 1 ]; then
    install mindspore "mindspore==2.10.0" "2.10.0"
else
    echo "mindspore: skipped (--without-mindspore)"
fi

if "$py" -c "import npulaunch" 2>/dev/null; then
    echo "npulaunch: importable in the venv"
else
    echo "npulaunch: NOT importable in the venv (install it editable in python3: pip install -e .)" >&2
fi
echo "done: $(du -sh "$venv" | cut -f1) in $venv"
