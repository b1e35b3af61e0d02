#!/usr/bin/env bash
# Measures what a node costs at a given number of live leases: its resident
# memory right after they were created and after a restart, the time to take
# a snapshot of that state, and the time from a restart to ready.
#
#   bash test/scale/state-memory.sh [--leases 1000000] [--clients 128] [--keep DIR]
#
# It builds holdfast from this checkout, starts one node on 127.0.0.1 with
# its data in a temporary directory, fills it with `holdfast bench --workload
# lease-fill` (every lease held for a day), and prints one line per number.
set -euo pipefail

LEASES=1000000
CLIENTS=128
KEEP=""
while [ $# -gt 0 ]; do
	case $1 in
	--leases) LEASES=$2; shift 2 ;;
	--clients) CLIENTS=$2; shift 2 ;;
	--keep) KEEP=$2; shift 2 ;;
	-h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "state-memory: unknown argument $1" >&2; exit 2 ;;
	esac
done
[[ $LEASES =~ ^[1-9][0-9]*$ && $CLIENTS =~ ^[1-9][0-9]*$ ]] || { echo "state-memory: --leases and --clients take positive integers" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${KEEP:-$(mktemp -d)}
mkdir -p "$WORK"
BIN=$WORK/holdfast
PID=""
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	[ -z "$KEEP" ] && rm -rf "$WORK"
	return 0
}
trap cleanup EXIT

(cd "$ROOT" && go build -o "$BIN" ./cmd/holdfast)

# Two loopback ports nothing listens on.
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		(: </dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return 0; }
	done
	echo "state-memory: no free port" >&2
	exit 1
}
HTTP=$(free_port)
RAFT=$(free_port)
ADDR=127.0.0.1:$HTTP

start() {
	"$BIN" serve --data-dir "$WORK/data" --http-addr "$ADDR" --raft-addr "127.0.0.1:$RAFT" \
		--rate-limit 0 --log-level info >>"$WORK/node.log" 2>&1 &
	PID=$!
}
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.2f", a - b }'; }
# wait_ready prints the seconds from $1 until /readyz answers 200.
wait_ready() {
	local i
	for i in $(seq 1 1200); do
		if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/readyz")" = 200 ]; then
			since "$1"
			return 0
		fi
		kill -0 "$PID" 2>/dev/null || { tail -20 "$WORK/node.log" >&2; echo "state-memory: the node exited" >&2; exit 1; }
		sleep 0.05
	done
	echo "state-memory: the node was not ready in 60 s" >&2
	exit 1
}
rss_mib() { awk -v k="$1:" '$1 == k { printf "%.0f", $2 / 1024 }' "/proc/$PID/status"; }

t0=$(now)
start
wait_ready "$t0" >/dev/null
"$BIN" cluster settings --addr "$ADDR" --set "max_leases=$((LEASES > 2000000 ? LEASES : 2000000))" >/dev/null

echo "filling: $LEASES leases with $CLIENTS clients"
"$BIN" bench --addr "$ADDR" --workload lease-fill --clients "$CLIENTS" --count "$LEASES" --duration 60m | tee "$WORK/bench.txt"
held=$(curl -s "http://$ADDR/metrics" | awk '$1 == "holdfast_leases_held" { printf "%d", $2 }')
[ "$held" -ge "$LEASES" ] || { echo "state-memory: $held leases held, want $LEASES" >&2; exit 1; }
echo "leases_held=$held"
echo "rss_after_fill_mib=$(rss_mib VmRSS) peak_rss_mib=$(rss_mib VmHWM)"

t=$(now)
"$BIN" snapshot save --addr "$ADDR" --timeout 5m "$WORK/backup.hfsnap" >/dev/null
echo "snapshot_save_seconds=$(since "$t") snapshot_bytes=$(stat -c %s "$WORK/backup.hfsnap")"
# The node logs how long its part took: the Raft snapshot of the state, then
# the whole answer.
grep -o 'backup sent:.*' "$WORK/node.log" | tail -1
echo "rss_after_snapshot_mib=$(rss_mib VmRSS)"

kill -TERM "$PID"
wait "$PID" || true
t=$(now)
start
echo "restart_to_ready_seconds=$(wait_ready "$t")"
echo "rss_after_restart_mib=$(rss_mib VmRSS)"
held=$(curl -s "http://$ADDR/metrics" | awk '$1 == "holdfast_leases_held" { printf "%d", $2 }')
[ "$held" -ge "$LEASES" ] || { echo "state-memory: $held leases held after the restart, want $LEASES" >&2; exit 1; }
