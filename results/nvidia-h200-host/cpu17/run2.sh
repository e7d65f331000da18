#!/usr/bin/env bash
# Device call 2 (cpu17): cpu-compare at the head, then base vs head BenchmarkForward
# alternated, then per-step timing with each Winograd policy.
set -u
D=.gpuz-cpu17
unxz -k -f $D/cpu.test.xz $D/base.test.xz; chmod +x $D/cpu.test $D/base.test
O=$OUT
echo "# commit $(cat $D/commit) date $(date -u +%FT%TZ)" > $O/cpu-compare.txt
CPU_TEST=$D/cpu.test ROUNDS=${ROUNDS:-2} COUNT=2 BENCHTIME=0.5 BACKENDS="pytorch pytorch-cl onnxruntime" scripts/cpu-compare.sh >> $O/cpu-compare.txt 2> $O/cpu-compare.log
echo "compare done $(date -u +%T)" >&2
{
  echo "# base $(cat /dev/null)e58cf56 vs head $(cat $D/commit), alternating, BenchmarkForward 1s"
  for r in 1 2; do for t in 2 16; do for b in base head; do
    bin=$D/cpu.test; [ $b = base ] && bin=$D/base.test
    GOMAXPROCS=$t taskset -c 0-$((t-1)) $bin -test.run '^$' -test.bench '^BenchmarkForward$' -test.benchtime 1s -batches 1,8 | grep '^Benchmark' | sed "s/backend=cpu/backend=cpu-$b/"
  done; done; done
} > $O/base-head.txt 2>&1
echo "base-head done $(date -u +%T)" >&2
{
  for tw in 2:auto 16:auto 16:off 16:on; do t=${tw%%:*}; w=${tw##*:}
    INFERBENCH_CONV_WINOGRAD=$w GOMAXPROCS=$t taskset -c 0-$((t-1)) $D/cpu.test -test.run '^$' -test.bench '^BenchmarkForwardLayers$' -test.benchtime 2s -batches 1,8 | grep '^Benchmark' | sed "s/backend=cpu/backend=cpu-wino-$w/"
  done
} > $O/forward-layers.txt 2>&1
echo "all done $(date -u +%T)" >&2
