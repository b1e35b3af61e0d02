#!/usr/bin/env bash
# CI lint of server/openapi.json with a validator holdfast does not contain:
# Redocly CLI, installed from the npm registry into a temporary directory and
# run with its "minimal" ruleset (the OpenAPI 3.1 structure, $refs, schemas,
# examples, operation ids, path parameters). It fetches nothing while it
# lints: telemetry and the update check are off, and where unshare can make
# one it runs in a network namespace of its own, with no network at all.
# Exits non-zero on any error, and on any warning but the ones the document
# has on purpose (KNOWN below).
#
# Environment: REDOCLY_VERSION (default 2.77.0, which runs on Node.js 20.19
# or later), KEEP_WORKDIR=1 to keep the temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

REDOCLY_VERSION="${REDOCLY_VERSION:-2.77.0}"
DOC=server/openapi.json

# Warnings the document has on purpose, as "rule pointer":
# - GET /cluster/link answers 101 Switching Protocols, never a 2xx, and
#   GET /ui only redirects to /ui/ (301);
# - /debug/pprof/ is net/http/pprof's index path, trailing slash included,
#   and /ui/ the status page's (its assets are relative to it);
# - MethodNotAllowed is the router's answer to a method a path does not
#   take, which no operation can list (the end-to-end checker uses it).
KNOWN='operation-2xx-response #/paths/~1cluster~1link/get/responses
operation-2xx-response #/paths/~1ui/get/responses
no-path-trailing-slash #/paths/~1debug~1pprof~1
no-path-trailing-slash #/paths/~1ui~1
no-unused-components #/components/responses/MethodNotAllowed'

WORK="$(mktemp -d "${TMPDIR:-/tmp}/hf-openapi-lint.XXXXXX")"
cleanup() {
  local rc=$?
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
  echo "openapi-lint: FAIL: $*" >&2
  exit 1
}
step() { echo "openapi-lint: $*"; }

step "installing @redocly/cli@$REDOCLY_VERSION"
mkdir -p "$WORK/npm" "$WORK/home"
timeout 600 npm install --prefix "$WORK/npm" --no-audit --no-fund --no-update-notifier --loglevel=error \
  "@redocly/cli@$REDOCLY_VERSION" >"$WORK/npm.log" 2>&1 ||
  { cat "$WORK/npm.log" >&2; fail "npm install failed"; }

offline=()
if unshare --net true 2>/dev/null; then
  offline=(unshare --net)
  step "linting $DOC with no network"
else
  step "linting $DOC (unshare cannot make a network namespace here)"
fi
set +e
HOME="$WORK/home" REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1 \
  timeout 120 "${offline[@]}" "$WORK/npm/node_modules/.bin/redocly" lint --extends=minimal --format=json "$DOC" \
  >"$WORK/lint.json" 2>"$WORK/lint.err"
rc=$?
set -e

# Every problem, one a line: "severity rule pointer: message".
problems="$(node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  for (const p of r.problems) {
    const at = (p.location && p.location[0] && p.location[0].pointer) || "#";
    console.log(`${p.severity} ${p.ruleId} ${at}: ${p.message}`);
  }
' "$WORK/lint.json")" || { cat "$WORK/lint.err" >&2; fail "redocly lint did not report (exit $rc)"; }

unexpected=""
while IFS= read -r line; do
  [ -n "$line" ] || continue
  rule_at="${line#* }"
  rule_at="${rule_at%%: *}"
  if [[ "$line" == warn\ * ]] && grep -qxF -- "$rule_at" <<<"$KNOWN"; then
    echo "  known: $line"
  else
    unexpected+="$line"$'\n'
  fi
done <<<"$problems"

if [ -n "$unexpected" ]; then
  printf '%s' "$unexpected" >&2
  fail "redocly lint found problems in $DOC"
fi
[ "$rc" -eq 0 ] || { cat "$WORK/lint.err" >&2; fail "redocly lint exited $rc"; }
step "OK: $DOC is valid OpenAPI ($(grep -c . <<<"$problems") known warnings)"
