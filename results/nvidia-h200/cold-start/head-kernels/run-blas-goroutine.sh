#!/usr/bin/env bash
# cuBLAS first use on its own goroutine (new) against c3ca8e7 (old): warm starts alternating, then the cuda TestWarmup.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v21 R=/tmp/rec21 T=$(mktemp -d); mkdir -p $V $R
for f in inferbench-new inferbench-old cuda.test; do xz -dc .gpuz21/$f.xz > $V/$f; chmod +x $V/$f; done
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
log() { echo "[$(el)s] $*" | tee -a $R/summary.txt; }
log "gpu $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) $(cat .gpuz21/commit) nproc $(nproc)"
srv() { # label binary env...
  local label=$1 bin=$2; shift 2
  env INFERBENCH_CUDA_TIMELINE=$R/tl-$label.txt "$@" $V/$bin serve -backend cuda -precision fp16 -graphs -workers 2 -pipeline overlap -max-batch 256 -batches 1,32,256 \
    -http-addr 127.0.0.1:18000 -grpc-addr 127.0.0.1:18001 -metrics-addr "" > $R/serve-$label.log 2>&1 &
  local pid=$!
  for i in $(seq 1 400); do grep -q 'msg=warm-up' $R/serve-$label.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  kill -TERM $pid 2>/dev/null; wait $pid
  log "$label: $(grep -o 'msg=warm-up.*' $R/serve-$label.log | grep -o ' total=[^ ]*\| load=[^ ]*\| setup.init=[^ ]*\| setup.plan=[^ ]*\| setup.capture=[^ ]*\| setup.capture.blas-wait=[^ ]*\| setup.capture.record.first-slot=[^ ]*' | tr -d '\n')"
}
C="INFERBENCH_CUDNN_CACHE=$T/a.json CUDA_CACHE_PATH=$T/j"
srv first-new inferbench-new $C
for i in 1 2 3 4 5 6; do srv old-$i inferbench-old $C; srv new-$i inferbench-new $C; done
(cd inference/cuda && timeout 100 $V/cuda.test -test.run 'TestWarmup' -test.v -test.timeout 95s) > $R/test-warmup.txt 2>&1
log "TestWarmup rc=$? $(grep -c -- '^--- PASS' $R/test-warmup.txt) pass $(grep -c -- '--- FAIL' $R/test-warmup.txt) fail"
grep -B2 -A12 -- '--- FAIL\|Error Trace' $R/test-warmup.txt | head -40
tar -C $R -czf $OUT/rec21.tgz .
