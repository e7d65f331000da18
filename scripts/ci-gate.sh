#!/usr/bin/env bash
# ci-gate.sh: the benchmark regression gate for CI.
#
# 1. Builds the root test binary for a base commit (GATE_BASE, default HEAD^,
#    checked out with `git worktree add` in a temporary directory) and for the
#    working tree (HEAD), plus the gate program (scripts/gate).
# 2. Runs each benchmark of GATE_SPECS in a process of its own per side and
#    round, alternately (A B B A A B ...), GATE_ROUNDS rounds (at least 6;
#    beyond 6 only while the time budget allows). A process runs each
#    benchmark GATE_COUNT times for GATE_BENCHTIME each (time-based, so a
#    run is long enough to average over the machine's hiccups) and the first
#    run of each benchmark in each process is dropped (it pays for the
#    process's cold caches and heap sizing); the raw output is kept beside.
# 3. Runs the gate on the two files with its defaults (the README's headline
#    command): each benchmark is gated on one primary figure, its CPU time
#    per operation where it reports its CPU use (this barely moves when
#    other jobs take the cores), else its p50 latency; exit 1 only if that
#    figure's change is statistically significant (Mann-Whitney U, p-values
#    adjusted by Holm-Bonferroni over the benchmarks, alpha 0.05) and worse
#    than its threshold (5 %).
#
# If there is no base commit, or the base has no BenchmarkServer* benchmark
# or does not build, it says so and passes.
#
# Environment (all optional):
#   GATE_BASE       base ref (default HEAD^)
#   GATE_ROUNDS     interleaved rounds (default 16, minimum 6)
#   GATE_BUDGET     seconds of benchmarking after which no round beyond the
#                   sixth is started (default 170)
#   GATE_BENCHTIME  -test.benchtime of each run (default 0.5s)
#   GATE_COUNT      runs of each benchmark per process, the first dropped
#                   (default 2, minimum 2: one kept run per process, so the
#                   runs the gate compares are independent)
#   GATE_SPECS      benchmarks to run, one "pattern [test binary flag...]" per
#                   line; a second field without a leading - is a benchtime
#                   (default: BenchmarkServerOverhead with one client,
#                   batching off and on; the CPU server at batch 1, 1 worker,
#                   serial, on one core: -test.cpu=1)
#   GATE_SUITE      suite flags, used when both binaries know them
#                   (default: -model=tiny -backends=cpu -batches=1 -workers=1 -pipelines=serial)
#   GATE_FLAGS      flags for scripts/gate (default: none, the gate's defaults)
#   GATE_TAGS       build tags (e.g. cuda)
#   GATE_OUT        where base.txt, head.txt (runs kept), base.raw.txt,
#                   head.raw.txt (every run) and gate.txt go
#                   (default results/tmp/gate)
#   GATE_BUILD_ONLY=dir  only build base.test, head.test and gate into dir
#   GATE_BINS=dir        skip building: use dir/base.test, dir/head.test, dir/gate
#                        (for a machine without Go or git, such as the GPU machine)
set -euo pipefail

rounds=${GATE_ROUNDS:-16}
budget=${GATE_BUDGET:-170}
benchtime=${GATE_BENCHTIME:-0.5s}
count=${GATE_COUNT:-2}
# One client at a time: with several clients on 2 cores the p50 is bimodal.
# The CPU server runs on one core: its CPU time per request then holds no
# time spent spinning for a thread that another job has taken.
default_specs='^BenchmarkServerOverhead$/^workers=1$/^clients=1$/^batching=(off|on)$/^trace=off$
^BenchmarkServer$/^backend=cpu$/^batch=1$/^workers=1$/^pipeline=serial$ -test.cpu=1'
specs=${GATE_SPECS:-$default_specs}
suite=${GATE_SUITE:--model=tiny -backends=cpu -batches=1 -workers=1 -pipelines=serial}
gate_flags=${GATE_FLAGS:-}
tags=${GATE_TAGS:-}

if [ "$rounds" -lt 6 ]; then
	echo "ci-gate: GATE_ROUNDS=$rounds: the gate needs at least 6 processes per side" >&2
	exit 2
fi
if [ "$count" -lt 2 ]; then
	echo "ci-gate: GATE_COUNT=$count: the first run of each process is dropped, so at least 2" >&2
	exit 2
fi

start=$SECONDS
log() { printf 'ci-gate: [%3ds] %s\n' "$((SECONDS - start))" "$*"; }

work=$(mktemp -d)
worktree=""
cleanup() {
	if [ -n "$worktree" ]; then
		git worktree remove --force "$worktree" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${GATE_BINS:-}" ]; then
	bins=$GATE_BINS
	out=${GATE_OUT:-gate-results}
else
	root=$(git rev-parse --show-toplevel)
	cd "$root"
	out=${GATE_OUT:-results/tmp/gate}
	base_ref=${GATE_BASE:-HEAD^}
	if ! base=$(git rev-parse --verify -q "$base_ref^{commit}"); then
		log "no base commit ($base_ref): nothing to compare, PASS"
		exit 0
	fi
	bins=${GATE_BUILD_ONLY:-$work}
	mkdir -p "$bins"
	bins=$(cd "$bins" && pwd)
	log "base $(git rev-parse --short "$base") ($base_ref), head $(git rev-parse --short HEAD) + working tree"

	worktree=$work/base
	git worktree add --detach -f "$worktree" "$base" >/dev/null 2>&1
	log "building base test binary"
	if ! (cd "$worktree" && go test -c ${tags:+-tags "$tags"} -o "$bins/base.test" . >"$work/base-build.log" 2>&1); then
		sed 's/^/  /' "$work/base-build.log" | tail -20
		log "the base commit does not build a root test binary: nothing to compare, PASS"
		exit 0
	fi
	log "building head test binary and the gate"
	go test -c ${tags:+-tags "$tags"} -o "$bins/head.test" .
	go build -o "$bins/gate" ./scripts/gate
	if [ -n "${GATE_BUILD_ONLY:-}" ]; then
		log "built $bins/base.test, $bins/head.test and $bins/gate"
		exit 0
	fi
fi

listed=$("$bins/base.test" -test.list '^BenchmarkServer' 2>/dev/null || true)
if ! grep -q '^BenchmarkServer' <<<"$listed"; then
	log "the base commit has no BenchmarkServer benchmarks: nothing to compare, PASS"
	exit 0
fi

# Suite flags that both binaries accept (an older base may lack -model).
flags=()
for f in $suite; do
	if "$bins/base.test" -test.run '^$' -test.list '^$' "$f" >/dev/null 2>&1 &&
		"$bins/head.test" -test.run '^$' -test.list '^$' "$f" >/dev/null 2>&1; then
		flags+=("$f")
	else
		log "not passing $f: one of the binaries does not know it"
	fi
done

mkdir -p "$out"
for side in base head; do
	: >"$out/$side.txt"
	: >"$out/$side.raw.txt"
done
# drop_first drops the first result line of each benchmark in one process's
# output.
drop_first() { awk '/^Benchmark/ && !seen[$1]++ { next } { print }'; }
run_one() { # base|head
	local pattern rest
	while read -r pattern rest; do
		[ -n "$pattern" ] || continue
		local extra=()
		read -ra extra <<<"$rest"
		if [ "${#extra[@]}" -gt 0 ] && [ "${extra[0]#-}" = "${extra[0]}" ]; then
			extra[0]=-test.benchtime=${extra[0]}
		fi
		"$bins/$1.test" -test.run '^$' -test.bench "$pattern" -test.benchtime "$benchtime" -test.count "$count" \
			"${extra[@]}" "${flags[@]}" >"$work/run.txt" </dev/null
		cat "$work/run.txt" >>"$out/$1.raw.txt"
		drop_first <"$work/run.txt" >>"$out/$1.txt"
		if [ "$r" -eq 1 ] && ! grep -q '^Benchmark' "$work/run.txt"; then
			log "note: $1 has no benchmark matching $pattern"
		fi
	done <<<"$specs"
}
bench_start=$SECONDS
r=0
while [ "$r" -lt "$rounds" ]; do
	if [ "$r" -ge 6 ] && [ $((SECONDS - bench_start)) -ge "$budget" ]; then
		log "time budget of ${budget}s used: stopping after $r rounds"
		break
	fi
	r=$((r + 1))
	# A B B A ...: a drift in machine speed during the run hits both sides.
	if [ $((r % 2)) -eq 1 ]; then
		run_one base
		run_one head
	else
		run_one head
		run_one base
	fi
	log "round $r/$rounds done"
done

log "gate (files in $out)"
set +e
# shellcheck disable=SC2086 # GATE_FLAGS is a list of flags
"$bins/gate" $gate_flags "$out/base.txt" "$out/head.txt" | tee "$out/gate.txt"
status=${PIPESTATUS[0]}
set -e
log "done, exit status $status"
exit "$status"
