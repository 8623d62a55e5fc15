#!/usr/bin/env bash
# Offline validation of deploy/*.yaml against the Kubernetes OpenAPI schemas
# (kubernetes-validate from PyPI, strict: unknown fields are errors).
#
#   validate.sh [FILE...]        default: every deploy/*.yaml but kustomization.yaml
#
# Installs kubernetes-validate into a venv under ~/.cache/lockstep-venv
# (override with LOCKSTEP_VENV) once; later runs only validate. Fails on any
# ERROR, and on any WARN too: a WARN means a kind/apiVersion without a schema
# (a typo like apps/v2 would otherwise pass).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)

# Pinned: the schema set (and so what passes) changes with the package.
KV_VERSION=1.37.0
# The schemas closest to the kube-apiserver the tests run (v1.34.4, see
# tests/peers/kube/README.md); kubernetes-validate 1.37.0 ships 1.25 .. 1.37.
K8S_VERSION=1.34.0

venv=${LOCKSTEP_VENV:-$HOME/.cache/lockstep-venv}
kv=$venv/bin/kubernetes-validate

if [[ ! -x $kv ]] || [[ $("$kv" --version 2>/dev/null) != "$KV_VERSION" ]]; then
  # Debian's python3 lacks venv/ensurepip until python3-venv is installed.
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null
    else
      echo "validate.sh: python3 with venv and ensurepip is needed (Debian: python3-venv)" >&2
      exit 1
    fi
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KV_VERSION"
fi

if (($#)); then
  files=("$@")
else
  files=()
  for f in "$root"/deploy/*.yaml; do
    [[ $(basename "$f") == kustomization.yaml ]] || files+=("$f")
  done
fi
((${#files[@]})) || { echo "validate.sh: no manifests found in $root/deploy" >&2; exit 1; }

rc=0
out=$("$kv" --strict --kubernetes-version "$K8S_VERSION" "${files[@]}") || rc=$?
printf '%s\n' "$out"
if ((rc != 0)) || grep -qE '^(ERROR|WARN|FATAL)' <<<"$out"; then
  echo "validate.sh: deploy manifests are not valid Kubernetes $K8S_VERSION (kubernetes-validate $KV_VERSION, strict)" >&2
  exit 1
fi
n=$(grep -c '^INFO .* passed' <<<"$out" || true)
echo "validate.sh: $n resources in ${#files[@]} files valid against Kubernetes $K8S_VERSION (kubernetes-validate $KV_VERSION, strict)"
