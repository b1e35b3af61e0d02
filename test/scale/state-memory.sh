#!/usr/bin/env bash
# Measures what a node costs at a given number of live leases: its resident
# memory right after they were created and after a restart, the time to take
# a snapshot of that state, and the time from a restart to ready. With three
# nodes it also wipes a follower's data directory and starts it again under
# its --node-id with --join, as the README's wiped-node rule says, while the
# other two take lease cycles (holdfast bench --workload lease), and prints
# how long it took to be ready and to hold every lease, and the rate at which
# it received the state (the leader's snapshot in the snapshot format over
# those seconds). Every node keeps 1,024 log entries after a snapshot (the
# default is 10,240), and a second backup just before the wipe makes the
# leader compact its log, so the wiped follower must be sent the snapshot,
# not the whole log (wiped_follower_from says which it got: a small state's
# log is shorter than the entries kept, and is sent whole).
#
#   bash test/scale/state-memory.sh [--nodes 1|3] [--leases 1000000] [--clients 128] [--keep DIR]
#                                   [--ports HTTP,RAFT,...] [--result-bytes 0] [--jobs 0]
#                                   [--payload-bytes 1024] [--queue-load SECONDS] [--pin]
#                                   [--serve-arg ARG ...]
#
# With --result-bytes N every lease is completed with an N-byte JSON result
# (records of a day of finished work) instead of held; --jobs N then
# enqueues N jobs with --payload-bytes payloads (a queue per 100 jobs),
# never claimed. --queue-load S runs `holdfast bench --workload queue` with
# 64 clients for S seconds after the restart and prints resident memory
# during it; with --pin every node runs on CPU 0 and the load tool on CPU
# 1 during that load, as ../shared/bench/compare --pin does. Each
# --serve-arg is passed to every node's `holdfast serve` (to measure a
# setting, e.g. --serve-arg --snapshot-interval=30s). The script
# prints the peak resident memory (VmHWM: the most any moment used) after
# the fill and since the restart, and the bytes of the data directories
# against the records' raw bytes.
#
# It builds holdfast from this checkout, starts the nodes on 127.0.0.1 with
# their data in a temporary directory, fills the cluster with `holdfast bench
# --workload lease-fill` (every lease held for a day), takes a backup with
# `holdfast snapshot save`, stops every node and starts them again, and
# prints one line per number (rss_* in MiB, per node in node order). The
# nodes listen on free loopback ports below the kernel's ephemeral range,
# or on --ports (an HTTP and a Raft port per node).
set -euo pipefail

NODES=1
LEASES=1000000
CLIENTS=128
KEEP=""
PORTS=""
RESULT=0
JOBS=0
PAYLOAD=1024
QLOAD=0
PIN=0
SERVE_ARGS=()
while [ $# -gt 0 ]; do
	case $1 in
	--result-bytes) RESULT=$2; shift 2 ;;
	--jobs) JOBS=$2; shift 2 ;;
	--payload-bytes) PAYLOAD=$2; shift 2 ;;
	--queue-load) QLOAD=$2; shift 2 ;;
	--pin) PIN=1; shift ;;
	--serve-arg) SERVE_ARGS+=("$2"); shift 2 ;;
	--nodes) NODES=$2; shift 2 ;;
	--leases) LEASES=$2; shift 2 ;;
	--clients) CLIENTS=$2; shift 2 ;;
	--keep) KEEP=$2; shift 2 ;;
	--ports) PORTS=$2; shift 2 ;;
	-h | --help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "state-memory: unknown argument $1" >&2; exit 2 ;;
	esac
done
[[ $LEASES =~ ^[1-9][0-9]*$ && $CLIENTS =~ ^[1-9][0-9]*$ ]] || { echo "state-memory: --leases and --clients take positive integers" >&2; exit 2; }
[[ $NODES == 1 || $NODES == 3 ]] || { echo "state-memory: --nodes is 1 or 3" >&2; exit 2; }
for v in "$RESULT" "$JOBS" "$PAYLOAD" "$QLOAD"; do
	[[ $v =~ ^[0-9]+$ ]] || { echo "state-memory: --result-bytes, --jobs, --payload-bytes and --queue-load take integers" >&2; exit 2; }
done
# The queue load's tool runs on CPU 1 with --pin (and the nodes on CPU 0).
QLOAD_TOOL=()
if [ "$PIN" -eq 1 ]; then QLOAD_TOOL=(taskset -c 1); fi

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${KEEP:-$(mktemp -d)}
mkdir -p "$WORK"
BIN=$WORK/holdfast
PIDS=()
stop_all() {
	local p
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	PIDS=()
	return 0
}
cleanup() {
	stop_all
	[ -z "$KEEP" ] && rm -rf "$WORK"
	return 0
}
trap cleanup EXIT

(cd "$ROOT" && go build -o "$BIN" ./cmd/holdfast)

# A loopback port nothing listens on, below the ephemeral range (where an
# outgoing connection could take a node's port before it listens).
EPHEMERAL_LO=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((10000 + RANDOM % (EPHEMERAL_LO - 10000)))
		(: </dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return 0; }
	done
	echo "state-memory: no free port" >&2
	exit 1
}
HTTP=() RAFT=()
IFS=, read -r -a GIVEN <<<"$PORTS"
if [ -n "$PORTS" ] && [ "${#GIVEN[@]}" -ne $((2 * NODES)) ]; then
	echo "state-memory: --ports needs $((2 * NODES)) ports (HTTP and Raft per node)" >&2
	exit 2
fi
for i in $(seq 0 $((NODES - 1))); do
	HTTP+=("127.0.0.1:${GIVEN[2 * i]:-$(free_port)}")
	RAFT+=("127.0.0.1:${GIVEN[2 * i + 1]:-$(free_port)}")
done
ADDRS=$(IFS=,; echo "${HTTP[*]}")

start_all() {
	local i
	for i in $(seq 0 $((NODES - 1))); do
		start_node "$i"
	done
}
# start_node I starts node I, its pid in PIDS[I].
start_node() {
	local i=$1 j others join=()
	if [ "$NODES" -gt 1 ]; then
		others=()
		for j in $(seq 0 $((NODES - 1))); do
			if [ "$j" -ne "$i" ]; then others+=("${HTTP[j]}"); fi
		done
		join=(--bootstrap-expect "$NODES" --join "$(IFS=,; echo "${others[*]}")")
	fi
	"$BIN" serve --node-id "n$i" --data-dir "$WORK/data/n$i" --http-addr "${HTTP[i]}" --raft-addr "${RAFT[i]}" \
		--rate-limit 0 --trailing-logs 1024 --log-level info "${join[@]}" "${SERVE_ARGS[@]}" >>"$WORK/n$i.log" 2>&1 &
	PIDS[i]=$!
}
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.2f", a - b }'; }
# wait_ready prints the seconds from $1 until every node's /readyz answers 200.
wait_ready() {
	local i n p
	for i in $(seq 1 2400); do
		n=0
		for p in "${HTTP[@]}"; do
			[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$p/readyz")" = 200 ] && n=$((n + 1))
		done
		if [ "$n" -eq "$NODES" ]; then
			since "$1"
			return 0
		fi
		for p in "${PIDS[@]}"; do
			kill -0 "$p" 2>/dev/null || { tail -20 "$WORK"/n*.log >&2; echo "state-memory: a node exited" >&2; exit 1; }
		done
		sleep 0.05
	done
	echo "state-memory: the nodes were not ready in 120 s" >&2
	exit 1
}
# rss FIELD prints FIELD (VmRSS, VmHWM) of every node in MiB.
rss() {
	local p out=()
	for p in "${PIDS[@]}"; do out+=("$(awk -v k="$1:" '$1 == k { printf "%.0f", $2 / 1024 }' "/proc/$p/status")"); done
	(IFS=,; echo "${out[*]}")
}
# disk_parts prints the first node's data directory by part: the live
# store, the snapshots' files the store no longer holds (one du counts a
# hard-linked file once, under the first path that links it), the Raft
# log, and the rest.
disk_parts() {
	local d="$WORK/data/n0" state snaps log all
	read -r state snaps log <<<"$(du -sb "$d/state" "$d/snapshots" "$d/raft-log" | cut -f1 | tr '\n' ' ')"
	all=$(du -sb "$d" | cut -f1)
	echo "$1_store_bytes=$state $1_snapshot_only_bytes=$snaps $1_raft_log_bytes=$log $1_other_bytes=$((all - state - snaps - log))"
}
# check_held fails unless every node holds at least LEASES lease records
# and JOBS jobs.
check_held() {
	local p m leases jobs
	for p in "${HTTP[@]}"; do
		m=$(curl -s "http://$p/metrics")
		leases=$(awk '$1 == "holdfast_leases" { printf "%d", $2 }' <<<"$m")
		jobs=$(awk '$1 ~ /^holdfast_jobs\{/ { n += $2 } END { printf "%d", n }' <<<"$m")
		[ "${leases:-0}" -ge "$LEASES" ] || { echo "state-memory: $p holds ${leases:-0} leases $1, want $LEASES" >&2; exit 1; }
		[ "${jobs:-0}" -ge "$JOBS" ] || { echo "state-memory: $p holds ${jobs:-0} jobs $1, want $JOBS" >&2; exit 1; }
	done
}
# disk prints the bytes of every node's data directory (du: blocks in use).
disk() {
	local i out=()
	for i in $(seq 0 $((NODES - 1))); do out+=("$(du -sb "$WORK/data/n$i" | cut -f1)"); done
	(IFS=,; echo "${out[*]}")
}

start_all
wait_ready "$(now)" >/dev/null
# Room for the fill's queues (one per 100 jobs and client) and the queue
# load's (one per 100 cycles, at well under 100,000 cycles a second), never
# below the defaults.
QUEUES=$(((JOBS + 99) / 100 + CLIENTS + 1000 * QLOAD))
"$BIN" cluster settings --addr "$ADDRS" --set "max_leases=$((LEASES > 50000000 ? LEASES : 50000000))" \
	--set "max_queues=$((QUEUES > 500000 ? QUEUES : 500000))" --set "queues_per_client=$((QUEUES > 20 ? QUEUES : 20))" >/dev/null

echo "filling: $LEASES leases with $CLIENTS clients over $NODES node(s)"
"$BIN" bench --addr "$ADDRS" --workload lease-fill --result-bytes "$RESULT" --clients "$CLIENTS" --count "$LEASES" --duration 600m | tee "$WORK/bench.txt"
if [ "$JOBS" -gt 0 ]; then
	echo "filling: $JOBS jobs of $PAYLOAD bytes"
	"$BIN" bench --addr "$ADDRS" --workload enqueue --payload-bytes "$PAYLOAD" --clients "$CLIENTS" --count "$JOBS" --duration 600m | tee -a "$WORK/bench.txt"
fi
# Followers apply what the leader committed a moment later.
for _ in $(seq 1 100); do (check_held "after the fill") 2>/dev/null && break; sleep 0.1; done
check_held "after the fill"
held=$(curl -s "http://${HTTP[0]}/metrics" | awk '$1 == "holdfast_leases_held" { printf "%d", $2 }')
echo "leases=$LEASES leases_held=${held:-0} result_bytes=$RESULT jobs=$JOBS payload_bytes=$PAYLOAD"
echo "rss_after_fill_mib=$(rss VmRSS) peak_rss_mib=$(rss VmHWM)"
# Raw record bytes: each lease's key hash and result, each job's id, key
# and payload (as test/scale/statefill counts them).
raw=$((LEASES * (32 + RESULT) + JOBS * (16 + 11 + PAYLOAD)))
echo "disk_bytes=$(disk) raw_record_bytes=$raw"
disk_parts disk

t=$(now)
"$BIN" snapshot save --addr "$ADDRS" --timeout 30m "$WORK/backup.hfsnap" >/dev/null
echo "snapshot_save_seconds=$(since "$t") snapshot_bytes=$(stat -c %s "$WORK/backup.hfsnap")"
# The leader logs how long its part took: the Raft snapshot of the state,
# then the whole answer.
cat "$WORK"/n*.log | grep -o 'backup sent:.*' | tail -1
echo "rss_after_snapshot_mib=$(rss VmRSS)"
# Right after a fill the two snapshots kept hold store files compactions
# have replaced since; the backup's snapshot lets the older ones go.
echo "disk_after_snapshot_bytes=$(disk)"
disk_parts disk_after_snapshot

stop_all
t=$(now)
start_all
echo "restart_to_ready_seconds=$(wait_ready "$t")"
# A follower learns what the leader committed with the leader's next
# message, so it may answer ready a moment before it applied everything.
for _ in $(seq 1 200); do (check_held "after the restart") 2>/dev/null && break; sleep 0.05; done
echo "restart_to_current_seconds=$(since "$t")"
check_held "after the restart"
echo "rss_after_restart_mib=$(rss VmRSS)"
# Live heap: the node's heap profile forces a collection first and ends with
# the runtime's memory statistics.
heap=()
for p in "${HTTP[@]}"; do
	heap+=("$(curl -s "http://$p/debug/pprof/heap?gc=1&debug=1" | awk '$2 == "HeapAlloc" { printf "%.1f", $4 / 1048576 }')")
done
echo "heap_after_restart_mib=$(IFS=,; echo "${heap[*]}") peak_rss_since_restart_mib=$(rss VmHWM)"

if [ "$QLOAD" -gt 0 ]; then
	echo "queue load: 64 clients for $QLOAD s"
	if [ "$PIN" -eq 1 ]; then
		for p in "${PIDS[@]}"; do taskset -a -p -c 0 "$p" >/dev/null; done
	fi
	"${QLOAD_TOOL[@]}" "$BIN" bench --addr "$ADDRS" --workload queue --clients 64 --duration "${QLOAD}s" | tee "$WORK/bench-queue.txt"
	grep -q ' errors=0 ' "$WORK/bench-queue.txt" || { echo "state-memory: the queue load had errors" >&2; exit 1; }
	echo "rss_after_queue_load_mib=$(rss VmRSS) peak_rss_since_restart_mib=$(rss VmHWM)"
fi

[ "$NODES" -eq 3 ] || exit 0
# A follower wiped and started again under its id receives the state from
# the leader while the other two take writes. A backup first makes the
# leader (elected at the restart) take a snapshot and compact its log.
"$BIN" snapshot save --addr "$ADDRS" --timeout 30m "$WORK/backup2.hfsnap" >/dev/null
leader=$(curl -s "http://${HTTP[0]}/cluster/status" | grep -o '"leader_id":"[^"]*"' | cut -d'"' -f4)
victim=0
while [ "n$victim" = "$leader" ]; do victim=$((victim + 1)); done
others=()
for i in 0 1 2; do [ "$i" -ne "$victim" ] && others+=("${HTTP[i]}"); done
kill -TERM "${PIDS[victim]}"
wait "${PIDS[victim]}" 2>/dev/null || true
rm -rf "$WORK/data/n$victim"
"$BIN" bench --addr "$(IFS=,; echo "${others[*]}")" --workload lease --clients 16 --duration 15s >"$WORK/bench-during-rejoin.txt" 2>&1 &
load=$!
t=$(now)
start_node "$victim"
echo "wiped_follower=n$victim wiped_follower_ready_seconds=$(wait_ready "$t")"
for _ in $(seq 1 2400); do (check_held "after the rejoin") 2>/dev/null && break; sleep 0.05; done
check_held "after the rejoin"
secs=$(since "$t")
from=log
if grep -q 'Installed remote snapshot' "$WORK/n$victim.log"; then
	from=snapshot
	# When the follower had received the whole snapshot, and when it had
	# restored it into its store, from its log.
	at() { date -d "$(grep "$1" "$WORK/n$victim.log" | tail -1 | cut -d' ' -f1)" +%s.%N; }
	echo "wiped_follower_snapshot_received_seconds=$(awk -v a="$(at 'copied to local snapshot')" -v b="$t" 'BEGIN { printf "%.2f", a - b }')" \
		"wiped_follower_snapshot_installed_seconds=$(awk -v a="$(at 'Installed remote snapshot')" -v b="$t" 'BEGIN { printf "%.2f", a - b }')"
fi
bytes=$(stat -c %s "$WORK/backup2.hfsnap")
echo "wiped_follower_from=$from wiped_follower_current_seconds=$secs wiped_follower_mb_per_s=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f", b / 1e6 / s }')"
echo "rss_after_rejoin_mib=$(rss VmRSS)"

wait "$load" 2>/dev/null || true
grep -E 'ops/s|cycles/s|errors' "$WORK/bench-during-rejoin.txt" | head -3 || true
