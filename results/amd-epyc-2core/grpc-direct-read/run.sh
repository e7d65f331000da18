#!/bin/bash
# usage: ab.sh rounds "envset1" "envset2" ...  ; extra args via BENCHARGS
r=$1; shift
for i in $(seq $r); do for v in "$@"; do
 env $v /tmp/prot.test -test.run XXX -test.bench "${BENCH:-Transport/backend=nop/batch=.*/clients=1/transport=grpc\$}" -size 250x250 ${BENCHARGS:--batches 1,32 -clients 1} -test.benchtime ${BT:-200x} 2>&1 | grep '^Benchmark' | awk -v v="$v" '{n=$1; sub(/BenchmarkTransport\/backend=nop\//,"",n); printf "%-60s %-40s p50=%8.0f us samp/s=%s\n", v, n, $5/1000, $(NF-1)}'
done; done
