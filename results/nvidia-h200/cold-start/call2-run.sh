#!/bin/bash
# Call 2: final cold/warm starts (new vs main), speed check, GPU tests.
set -u
B=.gpuz-cold
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=$(mktemp -d); L=$T/logs; mkdir -p $L
S=$OUT/summary.txt
log() { echo "$@" | tee -a $S; }
START=$(date +%s)
el() { echo $(( $(date +%s) - START )); }
evict() { python3 - <<'PY'
import glob, os
n = 0
for pat in ['/usr/lib/x86_64-linux-gnu/libcudnn*', '/usr/local/cuda/lib64/libcublas*', '/usr/local/cuda/lib64/libnvrtc*',
            '/usr/lib/x86_64-linux-gnu/libcuda.so*', '/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler*',
            '/usr/lib/x86_64-linux-gnu/libnvidia-ml*', '.gpuz-cold/inferbench*']:
    for f in glob.glob(pat):
        try:
            fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd); n += 1
        except Exception as e:
            print(f, e)
print("evicted", n, "files")
PY
}
ARGS="serve -backend cuda -precision fp16 -graphs -workers 2 -pipeline overlap -max-batch 256 -batches 1,32,256 -http-addr 127.0.0.1:18000 -grpc-addr 127.0.0.1:18001"
srv() { # label binary extra-args env...
  local label=$1 bin=$2 extra=$3; shift 3
  local t0=$(date +%s.%N)
  env "$@" $B/$bin $ARGS $extra -metrics-addr "" > $L/$label.log 2>&1 &
  local pid=$!
  for i in $(seq 1 400); do
    grep -q 'msg=warm-up' $L/$label.log && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  local t1=$(date +%s.%N)
  kill -TERM $pid 2>/dev/null; wait $pid
  log "== $label [t=$(el)s] process-to-warm-up-line=$(awk "BEGIN{print $t1-$t0}")s"
  grep -o 'msg=warm-up.*' $L/$label.log | sed -E 's/ driver=[^ ]+ cuda=[^ ]+//; s/ cudnn-algo-cache-file=[^ ]+//; s/ nvml=.*//' | tee -a $S
  grep -q 'msg=warm-up' $L/$label.log || tail -5 $L/$label.log | tee -a $S
}
{ nvidia-smi --query-gpu=name,persistence_mode,driver_version --format=csv; uptime; free -g | head -2; } > $OUT/machine.txt 2>&1

# Fresh machine: the new build's first start, then second and third.
srv new-first-fresh inferbench "" INFERBENCH_CUDNN_CACHE=$T/a1.json CUDA_CACHE_PATH=$T/j1 INFERBENCH_COLD_DEBUG=1
srv new-second inferbench "" INFERBENCH_CUDNN_CACHE=$T/a1.json CUDA_CACHE_PATH=$T/j1
srv new-third inferbench "" INFERBENCH_CUDNN_CACHE=$T/a1.json CUDA_CACHE_PATH=$T/j1
# main (before): first start with libraries evicted and fresh caches, second, third.
evict >> $S
srv main-first-evicted inferbench-main "" INFERBENCH_CUDNN_CACHE=$T/m1.json CUDA_CACHE_PATH=$T/jm1
srv main-second inferbench-main "" INFERBENCH_CUDNN_CACHE=$T/m1.json CUDA_CACHE_PATH=$T/jm1
srv main-third inferbench-main "" INFERBENCH_CUDNN_CACHE=$T/m1.json CUDA_CACHE_PATH=$T/jm1
# new under the same emulation, and its second start again.
evict >> $S
srv new-first-evicted inferbench "" INFERBENCH_CUDNN_CACHE=$T/a2.json CUDA_CACHE_PATH=$T/j2
srv new-second-2 inferbench "" INFERBENCH_CUDNN_CACHE=$T/a2.json CUDA_CACHE_PATH=$T/j2
# exhaustive search (the old algorithm choice), first and second.
srv new-exh-first inferbench "" INFERBENCH_CUDNN_CACHE=$T/a5.json CUDA_CACHE_PATH=$T/j5 INFERBENCH_CUDNN_SEARCH=exhaustive
srv new-exh-second inferbench "" INFERBENCH_CUDNN_CACHE=$T/a5.json CUDA_CACHE_PATH=$T/j5 INFERBENCH_CUDNN_SEARCH=exhaustive
# staging buffers (-pinned-input=false), warm caches.
srv new-nopin-second inferbench "-pinned-input=false" INFERBENCH_CUDNN_CACHE=$T/a1.json CUDA_CACHE_PATH=$T/j1
srv main-nopin-second inferbench-main "-pinned-input=false" INFERBENCH_CUDNN_CACHE=$T/m1.json CUDA_CACHE_PATH=$T/jm1
grep -h '^COLD' $L/new-first-fresh.log >> $S
cp $T/a1.json $L/algos-quick.json; cp $T/m1.json $L/algos-main.json; cp $T/a5.json $L/algos-exhaustive.json
tar czf $OUT/serve-logs.tar.gz -C $T logs
log "serve runs done [t=$(el)s]"

# Speed check: forward pass, main's algorithms vs the new search's, same call.
BENCH='^BenchmarkWorker$/^precision=fp16$/^graphs=on$/^pipeline=overlap$/^batch=(1|32|256)$/^input=pinned$/^convs=legacy$/^datatype=fp32$'
for c in 1 2; do
  INFERBENCH_CUDNN_CACHE=$T/m1.json timeout 40 $B/cuda-main.test -test.run '^$' -test.bench "$BENCH" -test.benchtime 300x 2>&1 | grep -E '^Benchmark' | sed 's/^/main /' | tee -a $OUT/bench.txt
  INFERBENCH_CUDNN_CACHE=$T/a1.json timeout 40 $B/cuda.test -test.run '^$' -test.bench "$BENCH" -test.benchtime 300x 2>&1 | grep -E '^Benchmark' | sed 's/^/new /' | tee -a $OUT/bench.txt
done
log "bench done [t=$(el)s]"

# GPU tests: the gate, then the tests the change touches, then the rest.
timeout 20 $B/cudadrv.test -test.v -test.run 'TestGate' > $OUT/cudadrv-tests.txt 2>&1; log "cudadrv tests rc=$? [t=$(el)s]"
FIRST='TestWarmup|TestStartThenOpen|TestLogitsMatchReference|TestFP16AgreesWithFP32|TestOverlapGoroutines|TestAlgoCacheOff|TestRegisterHost|TestLaunchGap|TestOpenErrors|TestDescribe|TestSampler|TestPyTorchReference'
LEFT=$(( 188 - $(el) ))
INFERBENCH_CUDNN_CACHE=$T/tests.json timeout $((LEFT+3)) $B/cuda.test -test.v -test.timeout ${LEFT}s -test.run "$FIRST" > $OUT/tests.txt 2>&1
log "tests (touched) rc=$? [t=$(el)s]"
LEFT=$(( 188 - $(el) ))
if [ $LEFT -gt 10 ]; then
  echo "======== the rest" >> $OUT/tests.txt
  INFERBENCH_CUDNN_CACHE=$T/tests.json timeout $((LEFT+3)) $B/cuda.test -test.v -test.timeout ${LEFT}s -test.skip "$FIRST" >> $OUT/tests.txt 2>&1
  log "tests (rest) rc=$? [t=$(el)s]"
fi
grep -E '^(--- |PASS|FAIL|ok|panic)' $OUT/tests.txt $OUT/cudadrv-tests.txt >> $S
