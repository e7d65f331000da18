#!/usr/bin/env bash
# HTTP client: writev chunk size against net/http's copy loop, batch 256 with 4 in flight, alternating rounds.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v11 R=/tmp/rec11; mkdir -p $V $R
for f in root-old.test root-c64k.test root-c128k.test root-c256k.test inferbench; do xz -dc .gpuz11/$f.xz > $V/$f; chmod +x $V/$f; done
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
A="-backends cuda -workers 2 -pipelines overlap -precisions fp16 -graphs on -pinned-input -loads closed -transports http -serve-bin $V/inferbench"
echo "# HTTP client writev chunks (old b0e5a38: net/http copy loop; c64k, c128k, c256k), server inferbench a6708c6; $A -batches 256 -concurrency 4 -test.benchtime 100x" > $R/chunks.txt
for r in 1 2 3 4; do
  for b in old c64k c128k c256k; do
    $V/root-$b.test -test.run '^$' -test.bench 'Server$' $A -batches 256 -concurrency 4 -test.benchtime 100x | grep ^Benchmark | sed "s/transport=http/transport=http-$b/" >> $R/chunks.txt
  done
  echo "[$(el)s] round $r" >&2
done
grep ^Benchmark $R/chunks.txt | awk '{s="";for(i=1;i<=NF;i++){if($i=="samples/s"||$i=="p50-latency-ns")s=s" "$i"="$(i-1)}; print $1, s}' | sed 's/BenchmarkServer\/backend=cuda\///; s/workers=2\/pipeline=overlap\/precision=fp16\/graphs=on\/devices=1\/load=closed\///'
cp $R/chunks.txt $OUT/
