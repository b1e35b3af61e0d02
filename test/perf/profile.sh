#!/usr/bin/env bash
# Where each node's CPU goes under the pinned 64-client queue load.
#
# usage: test/perf/profile.sh [WORKLOAD...]   (default: queue-enqueue queue-cycle)
#
# Starts three holdfast nodes built from this checkout on CPU 0, as
# ../shared/bench/compare --pin starts them, runs the bench folder's
# holdfastload client on the other CPUs with 64 workers, takes a 15 s CPU
# profile of the leader and of a follower in the middle of the run, and
# prints each node's CPU per operation split by component
# (test/perf/cpu-share.py), and each node's CPU, read and write system
# calls, minor page faults and thread switches per operation from /proc.
# With LEADER_ONLY=1 every client talks to the leader, so the followers
# serve no client requests. With STRACE=1 it also counts each node's
# system calls for 5 s (strace -c, in OUT). With ALLOCS=1 it also keeps the
# leader's and the follower's allocations during the profiles' window
# (OUT/WORKLOAD-ROLE.allocs.pprof, read with go tool pprof -sample_index
# alloc_space -base OUT/WORKLOAD-ROLE.allocs0.pprof ...), and the follower's
# live heap at the window's end (OUT/WORKLOAD-follower.heap.pprof, read with
# go tool pprof -sample_index inuse_space). SERVE_ARGS adds arguments to
# every node's holdfast serve (for example --snapshot-interval 5s). The
# workload "latency" (or LATENCY=1) also runs holdfast bench --workload
# enqueue with --latency-log on the same cluster and prints where its slow
# requests are (test/perf/dips.py) and when the log began each segment file
# (its birth time: right after the roll before). Env:
# CLIENTS (64), DUR (30s), OUT (a new
# temporary folder, kept), HOLDFASTLOAD (the client binary; default: built
# from ../shared/bench/holdfastload).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CLIENTS=${CLIENTS:-64}
DUR=${DUR:-30s}
SERVE_ARGS=${SERVE_ARGS:-}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/holdfast-profile.XXXXXX")}
WORKLOADS=("${@:-queue-enqueue queue-cycle}")
[ $# -eq 0 ] && WORKLOADS=(queue-enqueue queue-cycle)
LATENCY=${LATENCY:-}
LOOP=()
for w in "${WORKLOADS[@]}"; do
	if [ "$w" = latency ]; then LATENCY=1; else LOOP+=("$w"); fi
done
NCPU=$(nproc)
[ "$NCPU" -ge 2 ] || { echo "needs 2 CPUs" >&2; exit 1; }
mkdir -p "$OUT"
go build -o "$OUT/holdfast" ./cmd/holdfast
LOAD=${HOLDFASTLOAD:-}
if [ -z "$LOAD" ]; then
	(cd ../shared/bench/holdfastload && go build -o "$OUT/holdfastload" .)
	LOAD=$OUT/holdfastload
fi
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
BASE=$((20000 + RANDOM % 20000))
for i in 0 1 2; do
	join=""
	for j in 0 1 2; do [ $j -ne $i ] && join+="${join:+,}127.0.0.1:$((BASE + j))"; done
	taskset -c 0 "$OUT/holdfast" serve --node-id "n$((i + 1))" --data-dir "$OUT/data/n$((i + 1))" \
		--http-addr "127.0.0.1:$((BASE + i))" --raft-addr "127.0.0.1:$((BASE + 10 + i))" \
		--rate-limit 0 --bootstrap-expect 3 --join "$join" $SERVE_ARGS >"$OUT/n$((i + 1)).log" 2>&1 &
	PIDS+=($!)
done
ready=0
for _ in $(seq 1 120); do
	ready=0
	for i in 0 1 2; do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((BASE + i))/readyz")" = 200 ] && ready=$((ready + 1))
	done
	[ $ready -eq 3 ] && break
	sleep 0.5
done
[ $ready -eq 3 ] || { echo "cluster not ready" >&2; exit 1; }
leader=""
for i in 0 1 2; do
	s=$(curl -s "http://127.0.0.1:$((BASE + i))/cluster/status")
	[[ $s =~ \"leader_http_addr\":\"([^\"]+)\" ]] && leader=${BASH_REMATCH[1]} && break
done
[ -n "$leader" ] || { echo "no leader" >&2; exit 1; }
# A new cluster raises its level about 10 s after it forms, and every node
# then snapshots in the new format: wait for that, as compare's runs come
# after it, so that no run measures it (a build without cluster levels has
# nothing to wait for).
risen=0
for _ in $(seq 1 60); do
	risen=0
	for i in 0 1 2; do
		s=$(curl -s "http://127.0.0.1:$((BASE + i))/cluster/status")
		if [[ $s != *'"active_level"'* ]]; then
			risen=$((risen + 1))
		elif [[ $s =~ \"level\":([0-9]+) ]] && l=${BASH_REMATCH[1]} &&
			[[ $s =~ \"active_level\":([0-9]+) ]] && [ "${BASH_REMATCH[1]}" = "$l" ]; then
			risen=$((risen + 1))
		fi
	done
	[ $risen -eq 3 ] && break
	sleep 0.5
done
[ $risen -eq 3 ] || { echo "the cluster level did not rise" >&2; exit 1; }
sleep 2
curl -s -o /dev/null -X PUT -H 'Content-Type: application/json' -d '{"queues_per_client":100000000}' "http://$leader/cluster/settings"
nodes=$leader
follower=""
for i in 0 1 2; do
	a=127.0.0.1:$((BASE + i))
	[ "$a" != "$leader" ] && follower=${follower:-$a} && [ -z "${LEADER_ONLY:-}" ] && nodes+=",$a"
done
# counters PID...: for each process, one line of what it has used so far
# (CPU seconds, minor page faults, read and write system calls, thread
# switches), as procwatch.py reads them for compare's servers.
counters() { python3 "$ROOT/test/perf/procwatch.py" counters "$@"; }
roles=""
for i in 0 1 2; do
	a=127.0.0.1:$((BASE + i))
	r=follower
	[ "$a" = "$leader" ] && r=leader
	[ "$a" = "$follower" ] && r="follower(profiled)"
	roles+="${roles:+,}n$((i + 1)) $r"
done
echo "leader $leader, follower $follower, results in $OUT${LEADER_ONLY:+ (every client on the leader)}"
# metric NAME: the leader's value of a Prometheus series (first match).
metric() {
	local all
	all=$(curl -s "http://$leader/metrics")
	awk -v m="$1" 'index($0, m) == 1 { print $2; exit }' <<<"$all"
}
for w in "${LOOP[@]}"; do
	idx0=$(metric holdfast_raft_commit_index)
	ops0=$(metric 'holdfast_proposals_total{outcome="applied"}')
	taskset -c "1-$((NCPU - 1))" "$LOAD" -nodes "$nodes" -workloads "$w" -c "$CLIENTS" -dur "$DUR" -warmup 2s -runs 1 \
		-json "$OUT/$w.jsonl" >"$OUT/$w.client.log" 2>&1 &
	client=$!
	sleep 8
	if [ -n "${ALLOCS:-}" ]; then
		curl -s -o "$OUT/$w-leader.allocs0.pprof" "http://$leader/debug/pprof/allocs"
		curl -s -o "$OUT/$w-follower.allocs0.pprof" "http://$follower/debug/pprof/allocs"
	fi
	counters "${PIDS[@]}" >"$OUT/$w.counters0"
	t0=$(date +%s.%N)
	curl -s -o "$OUT/$w-leader.pprof" "http://$leader/debug/pprof/profile?seconds=15" &
	p1=$!
	curl -s -o "$OUT/$w-follower.pprof" "http://$follower/debug/pprof/profile?seconds=15" &
	p2=$!
	wait "$p1" "$p2"
	counters "${PIDS[@]}" >"$OUT/$w.counters1"
	t1=$(date +%s.%N)
	if [ -n "${ALLOCS:-}" ]; then
		curl -s -o "$OUT/$w-leader.allocs.pprof" "http://$leader/debug/pprof/allocs"
		curl -s -o "$OUT/$w-follower.allocs.pprof" "http://$follower/debug/pprof/allocs"
		curl -s -o "$OUT/$w-follower.heap.pprof" "http://$follower/debug/pprof/heap?gc=1"
	fi
	if [ -n "${STRACE:-}" ]; then
		# System calls by kind, counted for 5 s on the leader and a follower.
		for role in leader follower; do
			addr=$leader
			[ $role = follower ] && addr=$follower
			pid=$(ss -ltnpH "sport = :${addr##*:}" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
			timeout -s INT 5 strace -c -f -p "$pid" -o "$OUT/$w-$role.strace" >/dev/null 2>&1 || true
		done
	fi
	wait "$client"
	idx1=$(metric holdfast_raft_commit_index)
	ops1=$(metric 'holdfast_proposals_total{outcome="applied"}')
	python3 -c "import sys; e=float(sys.argv[2])-float(sys.argv[1]); p=float(sys.argv[4])-float(sys.argv[3]); print(f'Raft entries {e:.0f}, commands proposed on the leader {p:.0f}, {p/max(e,1):.1f} per entry (forwarded commands count where they are proposed)')" "$idx0" "$idx1" "$ops0" "$ops1"
	ops=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][-1]; print(r["ops_per_s"])' "$OUT/$w.jsonl")
	echo "== $w: $ops ops/s"
	# Each node's CPU, system calls, page faults and thread switches per
	# operation over the profiles' window, from /proc.
	python3 -c "
import sys
ops, secs, roles = float(sys.argv[3]), float(sys.argv[5]) - float(sys.argv[4]), sys.argv[6].split(',')
rows = lambda f: [[float(x) for x in l.split()] for l in open(f)]
d = [[y - x for x, y in zip(a, b)] for a, b in zip(rows(sys.argv[1]), rows(sys.argv[2]))]
n = ops * secs
line = lambda what, fmt: print(what + ': ' + ', '.join(f'{r} {fmt(v)}' for r, v in zip(roles, d)))
line('server CPU per operation (/proc, the profiles\\' window)', lambda v: f'{1e6 * v[0] / n:.1f} us')
line('system calls per operation (/proc, reads/writes)', lambda v: f'{v[2] / n:.2f}/{v[3] / n:.2f}')
line('minor page faults and thread switches per operation (/proc)', lambda v: f'{v[1] / n:.2f}/{v[4] / n:.2f}')
" "$OUT/$w.counters0" "$OUT/$w.counters1" "$ops" "$t0" "$t1" "$roles"
	python3 test/perf/cpu-share.py --ops "$(python3 -c "print(float('$ops')*15)")" "$OUT/holdfast" "$OUT/$w-leader.pprof" "$OUT/$w-follower.pprof"
done
if [ -n "$LATENCY" ]; then
	t0=$(date +%s.%N)
	taskset -c "1-$((NCPU - 1))" "$OUT/holdfast" bench --addr "$nodes" --workload enqueue --clients "$CLIENTS" \
		--duration "$DUR" --latency-log "$OUT/enqueue.latency.csv" >"$OUT/enqueue.bench.log" 2>&1
	echo "== holdfast bench --workload enqueue: $(cat "$OUT/enqueue.bench.log")"
	python3 test/perf/dips.py "$OUT/enqueue.latency.csv"
	echo "log segment files begun (n1, s since the run's start; each right after a roll):"
	stat -c '%.3W' "$OUT"/data/n1/raft-log/[0-9]*.seg "$OUT"/data/n1/raft-log/next-segment.tmp 2>/dev/null |
		awk -v t0="$t0" '$1 >= t0 { printf "%.1f ", $1 - t0 } END { print "" }'
fi
