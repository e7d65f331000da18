#!/usr/bin/env bash
# HTTP client A/B on the GPU host: root.test before 43974fb (net/http's copy loop) against the head
# (writev), alternating, the same inferbench server binary (head), batch 256 c=4 and batch 1 c=1.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
V=/tmp/v9 R=/tmp/rec9; mkdir -p $V $R
for f in root-old.test root-new.test inferbench; do xz -dc .gpuz9/$f.xz > $V/$f; chmod +x $V/$f; done
T0=$(date +%s); el() { echo $(($(date +%s) - T0)); }
A="-backends cuda -workers 2 -pipelines overlap -precisions fp16 -graphs on -pinned-input -loads closed -transports http -serve-bin $V/inferbench"
echo "# HTTP client A/B: old = root.test at b0e5a38 (before 43974fb), new = root.test at $(cat .gpuz9/commit 2>/dev/null || echo head); server: inferbench at head; $A" > $R/ab.txt
for r in 1 2 3; do
  for b in old new; do
    $V/root-$b.test -test.run '^$' -test.bench 'Server$' $A -batches 256 -concurrency 4 -test.benchtime 100x | grep ^Benchmark | sed "s/transport=http/transport=http-$b/" >> $R/ab.txt
    $V/root-$b.test -test.run '^$' -test.bench 'Server$' $A -batches 1 -concurrency 1 -test.benchtime 1000x | grep ^Benchmark | sed "s/transport=http/transport=http-$b/" >> $R/ab.txt
    echo "[$(el)s] round $r $b" >&2
  done
done
grep ^Benchmark $R/ab.txt | awk '{s="";for(i=1;i<=NF;i++){if($i=="samples/s"||$i=="p50-latency-ns")s=s" "$i"="$(i-1)}; print $1, s}' | sed 's/BenchmarkServer\/backend=cuda\///'
cp $R/ab.txt $OUT/
