#!/usr/bin/env bash
# install-perf-analyzer.sh DIR: put Triton's perf_analyzer in DIR, runnable on
# this x86-64 Linux machine without a GPU.
#
# PyPI's perf-analyzer package is a placeholder; the binary ships in
# tritonclient's 2.50.0 manylinux wheel. It needs libb64.so.0d (Debian's
# libb64-0d) and libcudart.so.12 (PyPI's nvidia-cuda-runtime-cu12; it loads
# without a GPU and is only called for CUDA shared memory). DIR/perf_analyzer
# is a wrapper that sets LD_LIBRARY_PATH and runs DIR/bin/perf_analyzer.
set -euo pipefail
dir=${1:?usage: install-perf-analyzer.sh DIR}
mkdir -p "$dir/bin" "$dir/lib"
dir=$(cd "$dir" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip() { python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp" "$@"; }
pip --platform manylinux1_x86_64 --python-version 3.11 tritonclient==2.50.0
pip --platform manylinux2014_x86_64 --python-version 3.11 nvidia-cuda-runtime-cu12==12.9.79
python3 - "$tmp" "$dir" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dir = sys.argv[1:]
want = {"tritonclient-2.50.0.data/data/bin/perf_analyzer": "bin/perf_analyzer",
        "nvidia/cuda_runtime/lib/libcudart.so.12": "lib/libcudart.so.12"}
for whl in glob.glob(os.path.join(tmp, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name, dst in want.items():
            if name in z.namelist():
                with z.open(name) as src, open(os.path.join(dir, dst), "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(os.path.join(dir, dst), 0o755)
PY
(cd "$tmp" && apt-get download libb64-0d >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get download libb64-0d; })
dpkg-deb -x "$tmp"/libb64-0d_*.deb "$tmp/deb"
cp "$tmp"/deb/usr/lib/x86_64-linux-gnu/libb64.so.0d "$dir/lib/"
cat >"$dir/perf_analyzer" <<SH
#!/bin/sh
LD_LIBRARY_PATH="$dir/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dir/bin/perf_analyzer" "\$@"
SH
chmod +x "$dir/perf_analyzer"
"$dir/perf_analyzer" --version 2>&1 | head -1 || true
echo "perf_analyzer: $dir/perf_analyzer"
