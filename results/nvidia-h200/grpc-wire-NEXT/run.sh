#!/usr/bin/env bash
# gRPC at batch 256 without shared memory (issue 14), beside HTTP and loopback's bound, and gRPC's
# batch-1 latency, for the binaries in $V and (optional) the baseline ones in $V0, alternating, so
# both are measured in the same call on the same host. Each folder holds, built at its commit:
#   go test -c -tags cuda -o $V/root.test .
#   go build -tags cuda -o $V/inferbench ./cmd/inferbench
#   go test -c -tags cuda -o $V/protocol.test ./inference/protocol
# Run from the repository root (protocol.test runs in inference/protocol). Records go to $R (and
# $OUT when set). About 8-9 minutes with V0, half without.
set -u
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-/usr/local/cuda/lib64}
: "${V:?set V to the folder of the binaries to measure}"
R=${R:-/tmp/rec-grpc-wire}; mkdir -p "$R"
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/gpu.txt" 2>&1
nproc > "$R/nproc.txt"
sides="new:$V"; [ -n "${V0:-}" ] && sides="base:$V0 new:$V"
S="-workers 2 -pipelines overlap -precisions fp16 -graphs on -pinned-input"
for round in 1 2; do
  for side in $sides; do
    name=${side%%:*} B=${side#*:}
    # cuda, batch 256, 4 outstanding over 4 connections (as results/nvidia-h200/batch256-wire-30d54be)
    A="-backends cuda $S -batches 256 -loads closed -concurrency 4 -grpc-conns 4 -serve-bin $B/inferbench"
    $B/root.test -test.run '^$' -test.bench 'Server$' $A -transports http,grpc -test.benchtime 100x >> "$R/batch256-$name.txt" 2>&1
    echo "[$(el)s] $name round $round: batch256 cuda rc=$?"
    # the same over the zero-cost back-end: the front door and the wire alone
    A="-backends nop -size 250x250 -workers 1 -pipelines serial -batches 256 -loads closed -concurrency 4 -grpc-conns 4 -serve-bin $B/inferbench"
    $B/root.test -test.run '^$' -test.bench 'Server$' $A -transports http,grpc -test.benchtime 60x >> "$R/batch256-nop-$name.txt" 2>&1
    echo "[$(el)s] $name round $round: batch256 nop rc=$?"
    # gRPC batch 1, one at a time: the p50 must not regress
    A="-backends cuda $S -batches 1 -loads closed -concurrency 1 -serve-bin $B/inferbench"
    $B/root.test -test.run '^$' -test.bench 'Server$' $A -transports grpc -test.benchtime 3000x >> "$R/batch1-$name.txt" 2>&1
    echo "[$(el)s] $name round $round: batch1 rc=$?"
  done
done
# loopback's bound, 4 clients on 4 connections, no model (once: it does not depend on our code)
(cd inference/protocol && $V/protocol.test -test.run '^$' -test.bench Payload -payload-mib 183.1 -payload-clients 4 -test.benchtime 10x -test.count 2) > "$R/payload.txt" 2>&1
echo "[$(el)s] payload rc=$?"
for f in "$R"/batch256*.txt "$R"/batch1*.txt "$R"/payload.txt; do
  grep ^Benchmark "$f" | awk -v f="$(basename "$f")" '{s="";for(i=1;i<=NF;i++){if($i=="samples/s"||$i=="bytes/s"||$i=="p50-latency-ns"||$i=="cpu-util-pct")s=s" "$i"="$(i-1)}; print f, $1, s}'
done
[ -n "${OUT:-}" ] && cp "$R"/*.txt "$OUT"/
exit 0
