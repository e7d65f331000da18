#!/usr/bin/env bash
# gate-power.sh: how often the regression gate catches slowdowns of known
# size, measured on this machine, and how often it fails unchanged code.
#
# It builds the root test binary twice from the working tree: as is (the
# base) and with the gateplant build tag (the head; see
# inference/gateplant_on.go and inference/cpu/gateplant_on.go), which plants
# a slowdown chosen by environment variables and nothing without them. Then
# it runs scripts/ci-gate.sh on the two binaries (GATE_BINS: the benchmarks
# and the gate exactly as CI runs them, the build aside) RUNS times for each
# condition, the conditions taking turns so that a change in the machine's
# load spreads over all of them:
#
#   none            nothing planted                         must pass
#   compute+10%     CPU back-end's Compute 10 % slower      must fail
#   submit+250ns    Server.Submit 250 ns slower             must fail
#   compute+25%+2hogs  Compute 25 % slower, two CPU hogs    must fail
#   none+2hogs      nothing planted, two CPU hogs           must pass
#
# A hog is a shell busy loop started before the gate run and ended after it.
# It writes a record: DIR/README.md (command, commit, machine, date, load,
# the table of caught / runs and the time per gate run, every run's primary
# figures) and DIR/<condition>/run<i>/ (the gate's table and ci-gate.sh's
# log).
#
# Usage: scripts/gate-power.sh [condition...]   (default: all five)
#
# Environment (all optional):
#   POWER_RUNS     gate runs per condition (default 10)
#   POWER_OUT      record directory (default results/<machine>/gate-power-<commit>)
#   POWER_MACHINE  <machine> above (default from the CPU's name and core count,
#                  e.g. intel-xeon-2core)
#   POWER_NOTE     a line for the record: what else ran on the machine
#   GATE_*         passed to scripts/ci-gate.sh (e.g. GATE_ROUNDS)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

runs=${POWER_RUNS:-10}
all_conditions=(none compute+10% submit+250ns compute+25%+2hogs none+2hogs)
if [ $# -gt 0 ]; then
	conditions=("$@")
else
	conditions=("${all_conditions[@]}")
fi

# plant sets compute, submit, hogs and want (fail|pass) for a condition.
plant() {
	case $1 in
	none) compute=0 submit=0 hogs=0 want=pass ;;
	compute+10%) compute=10 submit=0 hogs=0 want=fail ;;
	submit+250ns) compute=0 submit=250 hogs=0 want=fail ;;
	compute+25%+2hogs) compute=25 submit=0 hogs=2 want=fail ;;
	none+2hogs) compute=0 submit=0 hogs=2 want=pass ;;
	*)
		echo "gate-power: unknown condition $1 (known: ${all_conditions[*]})" >&2
		exit 2
		;;
	esac
}
for c in "${conditions[@]}"; do plant "$c"; done

model=$(awk -F: '/^model name/ { print $2; exit }' /proc/cpuinfo | sed 's/([^)]*)//g' | xargs)
if [ -z "${POWER_MACHINE:-}" ]; then
	POWER_MACHINE=$(echo "$model" | awk '{ print tolower($1) "-" tolower($2) }')-$(nproc)core
fi
commit=$(git rev-parse --short HEAD)
dirty=""
if ! git diff --quiet HEAD -- . 2>/dev/null; then
	dirty="-dirty"
fi
out=${POWER_OUT:-results/$POWER_MACHINE/gate-power-$commit$dirty}
mkdir -p "$out"
out=$(cd "$out" && pwd)

bins=$(mktemp -d)
hog_pids=()
stop_hogs() {
	local p
	for p in "${hog_pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	hog_pids=()
}
cleanup() {
	stop_hogs
	rm -rf "$bins"
}
trap cleanup EXIT

log() { printf 'gate-power: %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }

log "checking the planted slowdowns"
go test -count=1 -tags gateplant -run GatePlant ./inference ./inference/cpu >/dev/null
log "building base (default build) and head (-tags gateplant) test binaries and the gate"
build_start=$SECONDS
go test -c -o "$bins/base.test" .
go test -c -tags gateplant -o "$bins/head.test" .
go build -o "$bins/gate" ./scripts/gate
build_s=$((SECONDS - build_start))

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
results=$out/runs.tsv # condition, run, status, seconds, gated figures
printf 'condition\trun\tstatus\tseconds\tprimary figures\n' >"$results"

for i in $(seq "$runs"); do
	for c in "${conditions[@]}"; do
		plant "$c"
		dir=$out/$c/run$i
		mkdir -p "$dir"
		for _ in $(seq "$hogs"); do
			(while :; do :; done) &
			hog_pids+=($!)
		done
		t0=$SECONDS
		set +e
		GATE_BINS=$bins GATE_OUT=$dir GATE_PLANT_COMPUTE_PCT=$compute GATE_PLANT_SUBMIT_NS=$submit \
			scripts/ci-gate.sh >"$dir/ci-gate.log" 2>&1
		status=$?
		set -e
		secs=$((SECONDS - t0))
		stop_hogs
		rm -f "$dir/base.raw.txt" "$dir/head.raw.txt" "$dir/base.txt" "$dir/head.txt"
		if [ "$compute$submit" != 00 ] && ! grep -q '^gateplant: ' "$dir/ci-gate.log"; then
			log "$c run $i: the head binary did not report its planted slowdown"
			status=3
		fi
		# The gated rows: unit, change and verdict of each benchmark's primary figure.
		figs=$(awk '
			/^[^ ]/ { name = $1; sub(/^ServerOverhead\/workers=1\/clients=1\//, "overhead/", name); sub(/-[0-9]+$/, "", name); sub(/\/trace=off$/, "", name); sub(/^Server\/backend=cpu.*/, "server-cpu", name) }
			/^  / && $12 ~ /^[0-9.]+$/ { v = $14; for (k = 15; k <= NF; k++) v = v " " $k; printf "%s%s %s %s %s", sep, name, $1, $9, v; sep = "; " }
		' "$dir/gate.txt" 2>/dev/null || true)
		printf '%s\t%d\t%d\t%d\t%s\n' "$c" "$i" "$status" "$secs" "$figs" >>"$results"
		log "$c run $i/$runs: exit $status in ${secs}s: $figs"
	done
done
finished=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# The table: per condition, runs, caught (gate exit 1), errors, time per run.
table=$(awk -F'\t' -v conds="${conditions[*]}" '
	NR > 1 {
		n[$1]++; t[$1] += $4; if ($4 > mx[$1]) mx[$1] = $4
		if ($3 == 1) caught[$1]++; else if ($3 != 0) errs[$1]++
	}
	END {
		print "| planted change | must | runs | caught (gate failed) | errors | time per gate run, mean (max) |"
		print "|---|---|---|---|---|---|"
		k = split(conds, cs, " ")
		for (i = 1; i <= k; i++) {
			c = cs[i]; must = (c ~ /^none/) ? "pass" : "fail"
			printf "| %s | %s | %d | %d | %d | %.0f s (%d s) |\n", c, must, n[c], caught[c], errs[c], t[c] / n[c], mx[c]
		}
	}' "$results")

{
	echo "# Regression gate power on $POWER_MACHINE"
	echo
	echo "Commit \`$commit$dirty\`, $(nproc) CPUs ($model), $(uname -sr)."
	echo "From $started to $finished; load average (1, 5, 15 min) $load_start at the start, $load_end at the end."
	if [ -n "${POWER_NOTE:-}" ]; then
		echo
		echo "$POWER_NOTE"
	fi
	echo
	echo "Command (from the repository root):"
	echo
	echo '```'
	env_line=""
	for v in POWER_RUNS POWER_MACHINE $(compgen -e | grep '^GATE_' | grep -v '^GATE_PLANT_' || true); do
		[ -n "${!v:-}" ] && env_line+="$v=${!v} "
	done
	echo "${env_line}scripts/gate-power.sh ${*:-}"
	echo '```'
	echo
	echo "Base: the working tree's root test binary, default build; head: the same with \`-tags gateplant\`"
	echo "and the condition's \`GATE_PLANT_COMPUTE_PCT\` / \`GATE_PLANT_SUBMIT_NS\`; \`scripts/ci-gate.sh\` run on"
	echo "them with \`GATE_BINS\` (its defaults otherwise), the conditions taking turns. Building the"
	echo "three binaries took ${build_s} s (CI builds base and head in its gate step too). A hog is a shell busy loop."
	echo "Caught: the gate exited 1. Errors: any other non-zero exit (see the run's \`ci-gate.log\`)."
	echo
	echo "$table"
	echo
	echo "Every run: exit status, seconds, and each benchmark's primary figure (its change and verdict):"
	echo
	echo '| condition | run | exit | s | primary figures |'
	echo '|---|---|---|---|---|'
	awk -F'\t' 'NR > 1 { printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$results"
} >"$out/README.md"
log "record in $out/README.md"
echo "$table"
