#!/usr/bin/env bash
# Stop the Prism started by start-prism.sh PORT.
# usage: stop-prism.sh PORT   (uses the same PRISM_PID_FILE / TMPDIR as start-prism.sh)
set -euo pipefail
port=${1:?usage: stop-prism.sh PORT}
pidfile=${PRISM_PID_FILE:-${TMPDIR:-/tmp}/lockstep-github-prism-$port.pid}
[[ -f $pidfile ]] || { echo "stop-prism: no pid file $pidfile" >&2; exit 1; }
pid=$(cat "$pidfile")
if kill "$pid" 2>/dev/null; then
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
fi
rm -f "$pidfile"
echo "stop-prism: stopped pid $pid" >&2
