#!/usr/bin/env bash
# Installs the real peers the tests start and stop themselves:
#  - github/: Prism serving GitHub's OpenAPI description, GitHub's webhook
#    examples (npm, versions pinned in its package-lock.json);
#  - kube/: kube-apiserver and etcd built from the Go module proxy (versions
#    pinned in its go.mod files; cached in ~/.cache/lockstep-kube, so only the
#    first run builds: about 10 minutes on 2 cores).
# Idempotent; quiet on success but for one line per peer.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

need() { command -v "$1" >/dev/null 2>&1; }
missing=()
for tool in node npm curl openssl kubectl; do need "$tool" || missing+=("$tool"); done
if ((${#missing[@]})); then
  if [[ $(id -u) == 0 ]] && need apt-get; then
    pkgs=()
    for t in "${missing[@]}"; do
      case $t in node) pkgs+=(nodejs) ;; *) pkgs+=("$t") ;; esac
    done
    apt-get update -qq && apt-get install -y -qq "${pkgs[@]}" >/dev/null
  else
    echo "install.sh: missing tools: ${missing[*]}" >&2
    exit 1
  fi
fi

if [[ ! -d $here/github/node_modules/@stoplight/prism-cli ]] || [[ $here/github/package-lock.json -nt $here/github/node_modules ]]; then
  npm ci --prefix "$here/github" --no-audit --no-fund --loglevel=error
fi
echo "github peer: ready ($here/github)"

bins=$(bash "$here/kube/build.sh")
echo "kube peer: ready ($(echo "$bins" | tr '\n' ' '))"
