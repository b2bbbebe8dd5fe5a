#!/usr/bin/env bash
# Everything the full test suite uses, on a fresh Debian/Ubuntu machine: the system packages (through
# apt-get, as root or with sudo) and the Python extras (pip, editable). CI runs this same script
# (.ci/run), so the README's test command is the one CI runs. Without root or sudo it installs only
# the Python side and lists the system packages it could not install: the tests that need them are
# then skipped, each naming its package.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# command:package. util-linux: setpriv (PDEATHSIG for every rank), unshare and nsenter (the SSH test
# hosts are network namespaces); iproute2: ip; openssh-server/-client: the test hosts' sshd and ssh;
# slurmctld, slurmd, slurm-client, munge: the tests' own Slurm cluster; openmpi-bin: mpirun;
# chromium: the HTML report's screenshot test; procps: ps.
TOOLS="setpriv:util-linux unshare:util-linux nsenter:util-linux ip:iproute2 /usr/sbin/sshd:openssh-server
ssh:openssh-client ps:procps /usr/sbin/slurmctld:slurmctld /usr/sbin/slurmd:slurmd srun:slurm-client
/usr/sbin/munged:munge mpirun:openmpi-bin chromium:chromium"
need=""
for tool in $TOOLS; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need="$need ${tool##*:}"
done
if [ -n "$need" ]; then
  if [ "$(id -u)" = 0 ]; then
    SUDO=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo"
  else
    SUDO="none"
  fi
  if [ "$SUDO" = none ]; then
    echo "setup-dev: not root and no sudo: not installing$need (the tests that need them are skipped)" >&2
  else
    echo "== apt-get install$need"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need
  fi
fi

# CANN's TensorFlow stack is TF 1.15 on Python 3.7: the rank-side helper is tested there too, when a
# Python 3.7 exists (the tests name NPULAUNCH_TF1_PYTHON when they skip).
PY37=""
for candidate in "$HOME"/.pyenv/versions/3.7*/bin/python3.7 /root/.pyenv/versions/3.7*/bin/python3.7 \
                 "$(command -v python3.7 || true)"; do
  if [ -x "$candidate" ] && "$candidate" -c pass 2>/dev/null; then PY37=$candidate; break; fi
done
if [ -n "$PY37" ] && [ ! -x .ci/venv-tf1/bin/python ]; then
  echo "== TensorFlow 1.15 on $PY37 in .ci/venv-tf1"
  "$PY37" -m venv .ci/venv-tf1
  .ci/venv-tf1/bin/pip install -q "tensorflow-cpu==1.15.0" "protobuf<3.21" "numpy<1.19"
fi

# PyTorch's CPU build for the real torch jobs: PyPI's x86_64 torch is a CUDA build of several GB, so the
# version is pinned where pip finds a CPU wheel (a find-links folder, or TORCH_INDEX_URL, e.g.
# https://download.pytorch.org/whl/cpu). MindSpore's x86_64 wheel (800 MB) runs on the CPU as it is.
if ! python3 -c "import torch" 2>/dev/null; then
  echo "== pip install torch==${TORCH_VERSION:-2.13.0} (the CPU build)"
  python3 -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION:-2.13.0}"
fi

echo "== pip install -e '.[dev,tf,torch,mindspore,docs]' ($(python3 --version))"
python3 -m pip install -q -e '.[dev,tf,torch,mindspore,docs]'
