#!/usr/bin/env bash
# Cold start A/B: base (a6708c6) against rev (odd workers record the batch sizes largest first), alternating, warm caches.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v12 R=/tmp/rec12 T=$(mktemp -d); mkdir -p $V $R
for f in base rev; do xz -dc .gpuz12/inferbench-$f.xz > $V/inferbench-$f; chmod +x $V/inferbench-$f; done
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
log() { echo "[$(el)s] $*" | tee -a $R/summary.txt; }
log "gpu $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
srv() { # label binary
  local label=$1 bin=$2
  INFERBENCH_CUDNN_CACHE=$T/a.json $V/inferbench-$bin serve -backend cuda -precision fp16 -graphs -workers 2 -pipeline overlap -max-batch 256 -batches 1,32,256 \
    -http-addr 127.0.0.1:18000 -grpc-addr 127.0.0.1:18001 -metrics-addr "" > $R/serve-$label.log 2>&1 &
  local pid=$!
  for i in $(seq 1 400); do grep -q 'msg=warm-up' $R/serve-$label.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  kill -TERM $pid 2>/dev/null; wait $pid
  log "$label: $(grep -o 'msg=warm-up.*' $R/serve-$label.log | grep -o ' total=[^ ]*\| setup.init=[^ ]*\| setup.plan=[^ ]*\| setup.capture=[^ ]*\| setup.capture.record[^ ]*' | tr -d '\n')"
}
srv first base
for r in 1 2 3 4 5; do srv base-$r base; srv rev-$r rev; done
tar -C $R -czf $OUT/rec12.tgz .
