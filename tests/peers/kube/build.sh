#!/usr/bin/env bash
# Build kube-apiserver and etcd from the Go module proxy into a cache dir.
#
#   build.sh            -> builds (or reuses) both, prints their paths
#
# Cache: ${LOCKSTEP_KUBE_CACHE:-$HOME/.cache/lockstep-kube}/bin
# A binary is reused when its .stamp matches the pinned version and the
# wrapper's go.mod/go.sum; otherwise it is rebuilt. Quiet on success except
# for two lines on stdout, usable with eval:
#   KUBE_APISERVER_BIN=/.../kube-apiserver
#   ETCD_BIN=/.../etcd
# Needs Go >= 1.26 (etcd v3.6.16's go.mod says go 1.26.0); found on PATH or
# at /usr/local/go/bin/go, or set GO=/path/to/go.
set -euo pipefail

K8S_VERSION=v1.34.4      # k8s.io/kubernetes; staging modules pinned to v0.34.4
ETCD_VERSION=v3.6.16     # go.etcd.io/etcd/server/v3

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${LOCKSTEP_KUBE_CACHE:-$HOME/.cache/lockstep-kube}
BIN=$CACHE/bin

# die, find_go
source "$HERE/../go.sh"

# The wrappers must pin the same versions as this script.
grep -Eq "^(require)?[[:space:]]*k8s.io/kubernetes $K8S_VERSION( |$)" "$HERE/apiserver/go.mod" ||
  die "apiserver/go.mod does not require k8s.io/kubernetes $K8S_VERSION"
grep -Eq "^(require)?[[:space:]]*go.etcd.io/etcd/server/v3 $ETCD_VERSION( |$)" "$HERE/etcd/go.mod" ||
  die "etcd/go.mod does not require go.etcd.io/etcd/server/v3 $ETCD_VERSION"

stamp_of() { # name version wrapper-dir
  local sum
  sum=$(cat "$3/go.mod" "$3/go.sum" | sha256sum | cut -c1-16)
  echo "$1 $2 wrapper=$sum"
}

# build name version wrapper-dir package ldflags
build() {
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=$5
  local want out=$BIN/$1
  want=$(stamp_of "$name" "$version" "$dir")
  if [[ -x $out && -f $out.stamp && $(cat "$out.stamp") == "$want" ]]; then
    return 0
  fi
  local go log
  go=$(find_go)
  log=$CACHE/build-$name.log
  echo "build.sh: building $name $version (cold: minutes; log $log)" >&2
  local start=$SECONDS
  if ! (cd "$dir" && env GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 GOCACHE="$GOCACHE_DIR" GOMODCACHE="$GOMODCACHE_DIR" \
          "$go" build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg") >"$log" 2>&1; then
    echo "build.sh: building $name $version failed; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  mv -f "$out.tmp" "$out"
  echo "$want" >"$out.stamp"
  echo "build.sh: built $name in $((SECONDS - start))s" >&2
}

mkdir -p "$BIN"
# A build cache of our own, removed once both binaries are stamped: a cold
# kube-apiserver build leaves ~5 GB of objects that nothing reuses (the
# stamped binaries are), and CI disks are not large.
GOCACHE_DIR=$CACHE/go-build
# Modules likewise (about 1.5 GB): only the stamped binaries are reused, and
# a user's own module cache is left alone.
GOMODCACHE_DIR=$CACHE/go-mod
# Serialise concurrent callers (e.g. parallel test binaries) on one cache.
exec 9>"$CACHE/.lock"
flock 9

k8s_ld="-s -w"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  k8s_ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
build kube-apiserver "$K8S_VERSION" "$HERE/apiserver" k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ld"
build etcd "$ETCD_VERSION" "$HERE/etcd" go.etcd.io/etcd/server/v3 \
  "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION"

rm -rf "$GOCACHE_DIR"
if [[ -d $GOMODCACHE_DIR ]]; then
  GOMODCACHE="$GOMODCACHE_DIR" GOTOOLCHAIN=local "$(find_go)" clean -modcache
  rm -rf "$GOMODCACHE_DIR"
fi

echo "KUBE_APISERVER_BIN=$BIN/kube-apiserver"
echo "ETCD_BIN=$BIN/etcd"
