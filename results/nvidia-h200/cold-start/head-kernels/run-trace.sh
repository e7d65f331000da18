#!/usr/bin/env bash
# Cold-start timeline: a first start (libraries evicted) and warm starts alternating the default with
# X_TRUST_CACHE=1 (the cached algorithm's workspace query skipped), each writing INFERBENCH_CUDA_TIMELINE.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v20 R=/tmp/rec20 T=$(mktemp -d); mkdir -p $V $R
xz -dc .gpuz20/inferbench.xz > $V/inferbench; chmod +x $V/inferbench
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
log() { echo "[$(el)s] $*" | tee -a $R/summary.txt; }
log "gpu $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) commit $(cat .gpuz20/commit) nproc $(nproc)"
evict() { python3 - <<'PY'
import glob, os
n = 0
for pat in ['/usr/lib/x86_64-linux-gnu/libcudnn*', '/usr/local/cuda/lib64/libcublas*', '/usr/local/cuda/lib64/libnvrtc*',
            '/usr/lib/x86_64-linux-gnu/libcuda.so*', '/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler*',
            '/usr/lib/x86_64-linux-gnu/libnvidia-ml*', '/tmp/v20/inferbench']:
    for f in glob.glob(pat):
        fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd); n += 1
print("evicted", n, "files")
PY
}
srv() { # label env...
  local label=$1; shift
  env INFERBENCH_CUDA_TIMELINE=$R/tl-$label.txt "$@" $V/inferbench serve -backend cuda -precision fp16 -graphs -workers 2 -pipeline overlap -max-batch 256 -batches 1,32,256 \
    -http-addr 127.0.0.1:18000 -grpc-addr 127.0.0.1:18001 -metrics-addr "" > $R/serve-$label.log 2>&1 &
  local pid=$!
  for i in $(seq 1 400); do grep -q 'msg=warm-up' $R/serve-$label.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  kill -TERM $pid 2>/dev/null; wait $pid
  log "$label: $(grep -o 'msg=warm-up.*' $R/serve-$label.log | grep -o ' total=[^ ]*\| load=[^ ]*\| setup.init=[^ ]*\| setup.init.context=[^ ]*\| setup.plan=[^ ]*\| setup.plan.cache=[^ ]*\| setup.capture=[^ ]*' | tr -d '\n')"
}
C="INFERBENCH_CUDNN_CACHE=$T/a.json CUDA_CACHE_PATH=$T/j"
evict >> $R/summary.txt
srv first-evicted $C X_TRACE=1
for i in 1 2 3; do srv trace-$i $C X_TRACE=1; done
cp $T/a.json $R/algos.json
tar -C $R -czf $OUT/rec20.tgz .
