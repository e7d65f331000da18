#!/usr/bin/env bash
# The runs of this folder, on the AMD EPYC 2-core development machine, 2026-11-27 11:40-12:00 UTC.
# Binaries: go test -c of ./inference/internal/conv (convexp.test), ./inference/cpu (cpuexp.test) and . (rootexp.test)
# with exp.diff applied. Budgets alternate within each round.
set -u
explore() { # explore.txt: 2 rounds, 4 budgets
	for r in 1 2; do for b in 0 131072 524288 1048576; do EXP_SETB=$b ./convexp.test -test.run '^$' \
		-test.bench 'Layer/kernel=avx2/batch=(1|8)/layer=(stem|stage2-down|stage4|stage4-1x1)/algo=direct' -test.benchtime 8x; done; done
}
layer() { # layer.txt
	for r in 1 2 3 4; do for b in 0 524288; do EXP_SETB=$b ./convexp.test -test.run '^$' \
		-test.bench 'Layer/kernel=avx2/batch=(1|8)/layer=(stem|stage2-down|stage4|stage4-1x1)/algo=direct' -test.benchtime 8x |
		grep '^Benchmark' | sed "s/^/setb=$b /"; done; done > layer.txt
}
forward() { # forward.txt
	for i in 1 2 3 4 5 6 7 8; do for b in 0 524288; do EXP_SETB=$b ./cpuexp.test -test.run '^$' -test.bench '^BenchmarkForward$' \
		-test.benchtime 2s -batches 1,8 | grep '^Benchmark' | sed "s/^Benchmark/Benchmarks$b/"; done; done > forward.txt
}
layers() { # forward-layers.txt
	for i in 1 2 3; do for b in 0 524288; do EXP_SETB=$b ./cpuexp.test -test.run '^$' -test.bench '^BenchmarkForwardLayers$' \
		-test.benchtime 2s -batches 1,8 | grep '^Benchmark' | sed "s/^/setb=$b /"; done; done > forward-layers.txt
}
readme() { # readme-command.txt: the README's benchmark command, the binary built beforehand
	for r in 1 2 3; do for b in 0 524288; do s=$(date +%s.%N)
		EXP_SETB=$b ./rootexp.test -test.run '^$' -test.bench . -test.benchtime 10x -test.count 1 > /dev/null 2>&1
		echo "setb=$b round=$r wall=$(echo "$(date +%s.%N) - $s" | bc) s"; done; done > readme-command.txt
}
explore; layer; forward; layers; readme
