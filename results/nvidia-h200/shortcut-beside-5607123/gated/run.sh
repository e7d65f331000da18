#!/usr/bin/env bash
# The shortcut beside conv1 in graphs of batches below 32 (new) against 2a4b199 (old): the GPU tests of the
# new build, then in process at batch 1 one at a time (1 serial worker; 2 overlap workers), batch 32 and
# 256 with 4 outstanding, and batch 1 over gRPC + system shared memory, old and new alternating, two rounds.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v43 R=/tmp/rec43 T=$(mktemp -d); mkdir -p $V $R
tar -C $V -xJf .gpuz43/bins.tar.xz
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
log() { echo "[$(el)s] $*" | tee -a $R/summary.txt; tar -C $R -czf $OUT/rec43.tgz .; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu; } > $R/host.txt
log "$(sed -n 2p $R/host.txt) commit $(cat .gpuz43/commit) nproc $(nproc)"
(cd inference/cuda && timeout 150 $V/cuda.test -test.v -test.run "TestLogitsMatchReference|TestFP16AgreesWithFP32|TestWarmup|TestPyTorchReference" -test.timeout 145s) > $R/tests-cuda.txt 2>&1
log "cuda tests rc=$? $(grep -c -- '^--- PASS' $R/tests-cuda.txt) pass $(grep -c -- '--- FAIL' $R/tests-cuda.txt) fail $(grep -c -- '--- SKIP' $R/tests-cuda.txt) skip"
grep -B3 -A12 -- 'Error Trace' $R/tests-cuda.txt | head -40
export INFERBENCH_CUDNN_CACHE=$T/a.json
G="-backends cuda -precisions fp16 -graphs on -pinned-input"
fig() { grep ^Benchmark$1 $R/bench.txt | awk '{n=$1; sub(/.*batch=/,"b",n); sub(/\/precision.*concurrency=/," c",n); sub(/\/transport=/," ",n); printf " [%s", n; for(i=1;i<=NF;i++) if($i=="samples/s"||$i=="p50-latency-ns"||$i=="compute-ns") printf " %s=%s", $i, $(i-1); printf "]"}'; }
for r in 1 2; do for v in old new; do
  bin=$V/root.test sb=$V/inferbench; [ $v = old ] && bin=$V/root-old.test sb=$V/inferbench-old
  : > $R/cur.txt
  $bin -test.run '^$' -test.bench 'Server$' $G -workers 1 -pipelines serial -batches 1 -loads closed -concurrency 1 -test.benchtime 3000x >> $R/cur.txt 2>&1
  $bin -test.run '^$' -test.bench 'Server$' $G -workers 2 -pipelines overlap -batches 1 -loads closed -concurrency 1 -transports inproc,grpc-shm -serve-bin $sb -test.benchtime 3000x >> $R/cur.txt 2>&1
  $bin -test.run '^$' -test.bench 'Server$' $G -workers 2 -pipelines overlap -batches 32,256 -loads closed -concurrency 4 -test.benchtime 200x >> $R/cur.txt 2>&1
  sed "s/^Benchmark/Benchmark$v/" $R/cur.txt >> $R/bench.txt
  log "round $r $v: $(grep -c ^Benchmark $R/cur.txt) lines"
done; done
log "old: $(fig old)"
log "new: $(fig new)"
