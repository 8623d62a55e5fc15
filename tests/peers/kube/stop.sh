#!/usr/bin/env bash
# Stop the kube-apiserver and etcd started by start.sh DIR.
#   stop.sh DIR
# Sends SIGTERM (kube-apiserver first), waits up to 20 s, then SIGKILL.
# Only pids from DIR/*.pid whose command line is the expected binary are
# signalled. Leaves DIR's files (logs, certs, etcd-data) in place.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: stop.sh DIR" >&2; exit 2; }
DIR=$1
[[ -d $DIR ]] || { echo "stop.sh: no such directory: $DIR" >&2; exit 1; }

ours() { # pid name: is pid alive and running binary "name"?
  local exe
  kill -0 "$1" 2>/dev/null || return 1
  exe=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -n1) || return 1
  [[ $(basename "$exe") == *"$2"* ]]
}

rc=0
for name in kube-apiserver etcd; do
  f=$DIR/$name.pid
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  if [[ $pid =~ ^[0-9]+$ ]] && ours "$pid" "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do ours "$pid" "$name" || break; sleep 0.1; done
    if ours "$pid" "$name"; then
      echo "stop.sh: $name (pid $pid) ignored SIGTERM for 20s; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      ours "$pid" "$name" && { echo "stop.sh: $name (pid $pid) still running" >&2; rc=1; continue; }
    fi
  fi
  rm -f "$f"
done
exit $rc
