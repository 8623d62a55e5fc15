#!/usr/bin/env bash
# Build Flux's source-controller and kustomize-controller from the Go module
# proxy into a cache dir, with Flux's CRDs next to them. For benches/race.rs
# only: no test needs Flux, and CI never runs this.
#
#   build.sh            -> builds (or reuses) both, prints their paths
#
# Cache: ${LOCKSTEP_FLUX_CACHE:-$HOME/.cache/lockstep-flux}/bin (binaries)
# and .../crds (the controllers' CRDs, taken from their modules at build
# time; never committed). A binary is reused when its .stamp matches the
# pinned version and the wrapper's go.mod/go.sum. Quiet on success except
# for three lines on stdout, usable with eval:
#   SOURCE_CONTROLLER_BIN=/.../source-controller
#   KUSTOMIZE_CONTROLLER_BIN=/.../kustomize-controller
#   FLUX_CRDS=/.../crds
# Needs Go >= 1.26 (both go.mod files say go 1.26.0). v1.10.x of both needs
# Go 1.27: to bump, set GOTOOLCHAIN=go1.27.3 on the `go build` line below
# (here only, never globally), change the versions here and in the wrappers'
# go.mod (require + copied replaces), then `go mod tidy -e` in each wrapper.
set -euo pipefail

SOURCE_VERSION=v1.9.6      # github.com/fluxcd/source-controller
KUSTOMIZE_VERSION=v1.9.6   # github.com/fluxcd/kustomize-controller

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${LOCKSTEP_FLUX_CACHE:-$HOME/.cache/lockstep-flux}
BIN=$CACHE/bin
CRDS=$CACHE/crds

# die, find_go
source "$HERE/../go.sh"

grep -Eq "^(require)?[[:space:]]*github.com/fluxcd/source-controller $SOURCE_VERSION( |$)" "$HERE/source-controller/go.mod" ||
  die "source-controller/go.mod does not require github.com/fluxcd/source-controller $SOURCE_VERSION"
grep -Eq "^(require)?[[:space:]]*github.com/fluxcd/kustomize-controller $KUSTOMIZE_VERSION( |$)" "$HERE/kustomize-controller/go.mod" ||
  die "kustomize-controller/go.mod does not require github.com/fluxcd/kustomize-controller $KUSTOMIZE_VERSION"

stamp_of() { # name version wrapper-dir
  local sum
  sum=$(cat "$3/go.mod" "$3/go.sum" | sha256sum | cut -c1-16)
  echo "$1 $2 wrapper=$sum"
}

fresh() { # name version
  local out=$BIN/$1
  [[ -x $out && -f $out.stamp && $(cat "$out.stamp") == "$(stamp_of "$1" "$2" "$HERE/$1")" ]] &&
    compgen -G "$CRDS/$1/*.yaml" >/dev/null
}

# build name version: the wrapper module HERE/name builds the controller's
# main package (the module's root), and its CRDs are copied out of the
# module cache.
build() {
  local name=$1 version=$2 dir=$HERE/$1 pkg=github.com/fluxcd/$1
  fresh "$name" "$version" && return 0
  local go log want
  go=$(find_go)
  want=$(stamp_of "$name" "$version" "$dir")
  log=$CACHE/build-$name.log
  echo "build.sh: building $name $version (cold: minutes; log $log)" >&2
  local start=$SECONDS
  if ! (cd "$dir" && env GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 GOCACHE="$TMP/go-build" GOMODCACHE="$TMP/go-mod" \
          nice -n 10 "$go" build -trimpath -ldflags "-s -w" -o "$BIN/$name.tmp" "$pkg") >"$log" 2>&1; then
    echo "build.sh: building $name $version failed; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  local src=$TMP/go-mod/$pkg@$version/config/crd/bases
  compgen -G "$src/*.yaml" >/dev/null || die "no CRDs in $src"
  rm -rf "$CRDS/$name" && mkdir -p "$CRDS/$name"
  cp "$src"/*.yaml "$CRDS/$name/" && chmod -R u+w "$CRDS/$name"
  mv -f "$BIN/$name.tmp" "$BIN/$name"
  echo "$want" >"$BIN/$name.stamp"
  echo "build.sh: built $name in $((SECONDS - start))s" >&2
}

mkdir -p "$BIN" "$CRDS"
exec 9>"$CACHE/.lock"
flock 9
# A build and module cache of our own, removed once both binaries are
# stamped: only the stamped binaries (and the copied CRDs) are reused, and
# a user's own caches are left alone.
TMP=$(mktemp -d "$CACHE/tmp.XXXXXX")
cleanup() {
  if [[ -d $TMP/go-mod ]]; then
    GOMODCACHE="$TMP/go-mod" GOTOOLCHAIN=local "$(find_go)" clean -modcache 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

build kustomize-controller "$KUSTOMIZE_VERSION"
build source-controller "$SOURCE_VERSION"

echo "SOURCE_CONTROLLER_BIN=$BIN/source-controller"
echo "KUSTOMIZE_CONTROLLER_BIN=$BIN/kustomize-controller"
echo "FLUX_CRDS=$CRDS"
