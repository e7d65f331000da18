#!/usr/bin/env bash
# HTTP client A/B/C/D on the GPU host, alternating in rounds, one inferbench server binary (a6708c6):
# old = net/http's copy loop (b0e5a38), new = one writev of the whole body (a6708c6),
# c256k / c1m = writev in chunks of 256 KiB / 1 MiB. Batch 256 with 4 in flight, batch 1 one at a time.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v10 R=/tmp/rec10; mkdir -p $V $R
for f in root-old.test root-new.test root-c256k.test root-c1m.test inferbench; do xz -dc .gpuz10/$f.xz > $V/$f; chmod +x $V/$f; done
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
A="-backends cuda -workers 2 -pipelines overlap -precisions fp16 -graphs on -pinned-input -loads closed -transports http -serve-bin $V/inferbench"
echo "# HTTP client variants (old b0e5a38, new a6708c6, c256k, c1m), server inferbench a6708c6; $A" > $R/ab.txt
for r in 1 2 3; do
  for b in old new c256k c1m; do
    $V/root-$b.test -test.run '^$' -test.bench 'Server$' $A -batches 256 -concurrency 4 -test.benchtime 100x | grep ^Benchmark | sed "s/transport=http/transport=http-$b/" >> $R/ab.txt
    $V/root-$b.test -test.run '^$' -test.bench 'Server$' $A -batches 1 -concurrency 1 -test.benchtime 1000x | grep ^Benchmark | sed "s/transport=http/transport=http-$b/" >> $R/ab.txt
  done
  echo "[$(el)s] round $r" >&2
done
grep ^Benchmark $R/ab.txt | awk '{s="";for(i=1;i<=NF;i++){if($i=="samples/s"||$i=="p50-latency-ns")s=s" "$i"="$(i-1)}; print $1, s}' | sed 's/BenchmarkServer\/backend=cuda\///; s/workers=2\/pipeline=overlap\/precision=fp16\/graphs=on\/devices=1\/load=closed\///'
cp $R/ab.txt $OUT/
