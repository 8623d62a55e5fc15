#!/usr/bin/env bash
# Fetch mariadb-operator's Backup CRD (k8s.mariadb.com) for the backup-gate
# tests: `config/crd/bases/k8s.mariadb.com_backups.yaml` of the Go module
# github.com/mariadb-operator/mariadb-operator at the version the upstream
# C5C3 operators require, from the Go module proxy (the module zip; the
# proxy serves that exact version, though not a version list). Never
# committed here: cached like the kube peer's binaries.
#
#   fetch-crd.sh     -> prints the directory holding the CRD (for install-crds.sh)
#
# Cache: ${LOCKSTEP_KUBE_CACHE:-$HOME/.cache/lockstep-kube}/crds/mariadb-operator-$VERSION
# The file is checked against a pinned SHA-256; a mismatch is an error,
# nothing is installed. Proxy: $LOCKSTEP_GOPROXY, else https://proxy.golang.org.
set -euo pipefail

MODULE=github.com/mariadb-operator/mariadb-operator
VERSION=v0.38.1
FILE=config/crd/bases/k8s.mariadb.com_backups.yaml
SHA256=e83d9e4801f20169858d2649c63850f0a361ce420656612225e57d4912771d42

die() { echo "fetch-crd.sh: $*" >&2; exit 1; }
CACHE=${LOCKSTEP_KUBE_CACHE:-$HOME/.cache/lockstep-kube}
OUT=$CACHE/crds/mariadb-operator-$VERSION
PROXY=${LOCKSTEP_GOPROXY:-https://proxy.golang.org}
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9

target=$OUT/$(basename "$FILE")
if [[ -f $target ]] && [[ $(sha256sum "$target" | cut -d' ' -f1) == "$SHA256" ]]; then
  echo "$OUT"
  exit 0
fi
command -v curl >/dev/null || die "curl not found"
command -v unzip >/dev/null || die "unzip not found (tests/peers/install.sh installs it)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL --retry 3 -o "$tmp/m.zip" "$PROXY/$MODULE/@v/$VERSION.zip" ||
  die "cannot download $MODULE@$VERSION from $PROXY"
unzip -q -o "$tmp/m.zip" "$MODULE@$VERSION/$FILE" -d "$tmp" ||
  die "$FILE is not in $MODULE@$VERSION"
got=$(sha256sum "$tmp/$MODULE@$VERSION/$FILE" | cut -d' ' -f1)
[[ $got == "$SHA256" ]] || die "$FILE of $MODULE@$VERSION has SHA-256 $got, expected $SHA256"
mv -f "$tmp/$MODULE@$VERSION/$FILE" "$target"
echo "$OUT"
