#!/usr/bin/env bash
# Config.IdlePoll (serve -idle-poll) at batch 1, one request at a time, over gRPC with and without system
# shared memory: a running server (1 serial worker, and 2 overlap workers) driven with -target, idle-poll 0
# and 1ms alternating, two rounds.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v44 R=/tmp/rec44 T=$(mktemp -d); mkdir -p $V $R
tar -C $V -xJf .gpuz44/bins.tar.xz
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
log() { echo "[$(el)s] $*" | tee -a $R/summary.txt; tar -C $R -czf $OUT/rec44.tgz .; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu; } > $R/host.txt
log "$(sed -n 2p $R/host.txt) commit $(cat .gpuz44/commit) nproc $(nproc)"
export INFERBENCH_CUDNN_CACHE=$T/a.json
run() { # label poll workers pipeline
  local l=$1 pid i
  $V/inferbench serve -backend cuda -precision fp16 -graphs -workers $3 -pipeline $4 -batches 1 -idle-poll $2 \
    -http-addr "" -grpc-addr 127.0.0.1:18001 -metrics-addr "" > $R/serve-$l.log 2>&1 &
  pid=$!
  for i in $(seq 1 600); do grep -q 'msg=serving' $R/serve-$l.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
  $V/root.test -test.run '^$' -test.bench 'Server$' -target grpc://127.0.0.1:18001 -batches 1 -loads closed -concurrency 1 -transports grpc-shm,grpc -test.benchtime 3000x | sed "s/^Benchmark/Benchmark$l/" >> $R/bench.txt 2>&1
  kill -TERM $pid; wait $pid
  log "$l: $(grep ^Benchmark$l $R/bench.txt | tail -2 | awk '{n=$1; sub(/.*transport=/,"",n); printf " [%s", n; for(i=1;i<=NF;i++) if($i=="p50-latency-ns"||$i=="p99-latency-ns"||$i=="queue-ns") printf " %s=%s", $i, $(i-1); printf "]"}')"
}
for r in 1 2; do
  run serial1-poll0 0 1 serial
  run serial1-poll1ms 1ms 1 serial
  run overlap2-poll0 0 2 overlap
  run overlap2-poll1ms 1ms 2 overlap
done
