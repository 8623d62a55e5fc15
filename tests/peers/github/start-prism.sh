#!/usr/bin/env bash
# Start a Prism mock of GitHub's REST API on 127.0.0.1:PORT and wait until it answers.
#
# usage: start-prism.sh PORT
#
# Needs `npm ci` to have been run in this directory. On success prints the
# PID of the Prism process on stdout (nothing else goes to stdout), writes it
# to $PRISM_PID_FILE, leaves Prism running in the background and exits 0.
# Stop it with stop-prism.sh PORT (or kill the printed PID).
#
# Environment (all optional):
#   PRISM_READY_TIMEOUT  seconds to wait for the port to answer (default 120)
#   PRISM_SPEC           serve this spec file verbatim instead of the derived one
#   GITHUB_PEER_RAW=1    serve @octokit/openapi's api.github.com.json unmodified
#                        (no 401/403/404 added to the commit-status operations)
#   PRISM_NO_ACCEPT_SHIM=1  do not preload accept-shim.js (then
#                        `Accept: application/vnd.github+json` gets 406)
#   PRISM_LOG_LEVEL      prism -v level (default info: one block per request)
#   PRISM_DYNAMIC=1      pass --dynamic (faker-generated bodies instead of examples)
#   TMPDIR               where the log and PID file go (default /tmp)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "start-prism: error: $*" >&2; exit 1; }

port=${1:-}
[[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || die "usage: start-prism.sh PORT (got '${port}')"

timeout=${PRISM_READY_TIMEOUT:-120}
tmp=${TMPDIR:-/tmp}
log="$tmp/lockstep-github-prism-$port.log"
pidfile=${PRISM_PID_FILE:-$tmp/lockstep-github-prism-$port.pid}
prism_js="$here/node_modules/@stoplight/prism-cli/dist/index.js"
source_spec="$here/node_modules/@octokit/openapi/generated/api.github.com.json"

command -v node >/dev/null || die "node not found on PATH"
command -v curl >/dev/null || die "curl not found on PATH"
[[ -f $prism_js ]] || die "prism not installed: run 'npm ci' in $here"
[[ -f $source_spec ]] || die "@octokit/openapi not installed: run 'npm ci' in $here"

url="http://127.0.0.1:$port/"
if curl -s -o /dev/null -m 2 "$url"; then
  die "something already answers on 127.0.0.1:$port"
fi

# Which spec to serve.
if [[ -n ${PRISM_SPEC:-} ]]; then
  spec=$PRISM_SPEC
  [[ -f $spec ]] || die "PRISM_SPEC=$spec does not exist"
elif [[ ${GITHUB_PEER_RAW:-0} == 1 ]]; then
  spec=$source_spec
else
  # Derived once and cached inside node_modules, so `npm ci` invalidates it.
  version=$(node -p "require('$here/node_modules/@octokit/openapi/package.json').version")
  spec="$here/node_modules/.cache/lockstep-github-peer/api.github.com.$version.lockstep.json"
  if [[ ! -s $spec || $here/prepare-spec.js -nt $spec || $source_spec -nt $spec ]]; then
    node "$here/prepare-spec.js" "$source_spec" "$spec" || die "prepare-spec.js failed"
  fi
fi

args=(mock --errors -h 127.0.0.1 -p "$port" -v "${PRISM_LOG_LEVEL:-info}")
[[ ${PRISM_DYNAMIC:-0} == 1 ]] && args+=(--dynamic)

node_args=()
[[ ${PRISM_NO_ACCEPT_SHIM:-0} == 1 ]] || node_args+=(--require "$here/accept-shim.js")

# Launch node directly (not through npx) so $! is the process that listens.
start=$(date +%s.%N)
nohup node "${node_args[@]}" "$prism_js" "${args[@]}" "$spec" </dev/null >"$log" 2>&1 &
pid=$!
echo "$pid" >"$pidfile"

deadline=$((SECONDS + timeout))
while :; do
  if curl -s -o /dev/null -m 2 "$url"; then
    break
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$pidfile"
    echo "start-prism: error: prism exited before answering on $url; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    kill "$pid" 2>/dev/null || true
    rm -f "$pidfile"
    echo "start-prism: error: prism did not answer on $url within ${timeout}s (killed pid $pid); last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  sleep 0.25
done
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
echo "start-prism: ready on $url after ${elapsed}s (pid $pid, spec $(basename "$spec"), log $log, pid file $pidfile)" >&2
echo "$pid"
