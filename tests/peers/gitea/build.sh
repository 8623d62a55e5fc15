#!/usr/bin/env bash
# Build Gitea from the Go module proxy into a cache dir, with its templates
# and options beside it (Gitea reads them at start; the module carries them).
#
#   build.sh            -> builds (or reuses) Gitea, prints two lines:
#   GITEA_BIN=/.../gitea
#   GITEA_STATIC=/.../static     (STATIC_ROOT_PATH for app.ini)
#
# Cache: ${LOCKSTEP_GITEA_CACHE:-$HOME/.cache/lockstep-gitea}. Reused when
# its .stamp matches the pinned version and the wrapper's go.mod/go.sum.
# sqlite is built in (cgo, a C compiler is needed). Needs Go >= 1.26.2.
set -euo pipefail

GITEA_VERSION=v1.26.0

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${LOCKSTEP_GITEA_CACHE:-$HOME/.cache/lockstep-gitea}
BIN=$CACHE/bin
STATIC=$CACHE/static

# die, find_go
source "$HERE/../go.sh"

grep -Eq "^require code.gitea.io/gitea $GITEA_VERSION$" "$HERE/go.mod" ||
  die "go.mod does not require code.gitea.io/gitea $GITEA_VERSION"

mkdir -p "$BIN"
exec 9>"$CACHE/.lock"
flock 9

want="gitea $GITEA_VERSION wrapper=$(cat "$HERE/go.mod" "$HERE/go.sum" | sha256sum | cut -c1-16)"
out=$BIN/gitea
if ! [[ -x $out && -f $out.stamp && $(cat "$out.stamp") == "$want" && -d $STATIC/templates ]]; then
  go=$(find_go)
  log=$CACHE/build-gitea.log
  echo "build.sh: building gitea $GITEA_VERSION (cold: about 10 minutes; log $log)" >&2
  start=$SECONDS
  # A build cache of our own, removed once the binary is stamped (GBs that
  # nothing reuses).
  gocache=$CACHE/go-build
  # Modules likewise (about 1.2 GB), and a user's own module cache is left
  # alone.
  export GOMODCACHE=$CACHE/go-mod
  if ! (cd "$HERE" && env GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=1 GOCACHE="$gocache" \
          "$go" build -trimpath -tags "sqlite sqlite_unlock_notify" \
          -ldflags "-s -w -X main.Version=${GITEA_VERSION#v}" -o "$out.tmp" code.gitea.io/gitea) >"$log" 2>&1; then
    echo "build.sh: building gitea $GITEA_VERSION failed; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  moddir=$(cd "$HERE" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "$go" list -m -f '{{.Dir}}' code.gitea.io/gitea)
  rm -rf "$STATIC.tmp" && mkdir -p "$STATIC.tmp"
  cp -r "$moddir/templates" "$moddir/options" "$moddir/public" "$STATIC.tmp/"
  chmod -R u+w "$STATIC.tmp"
  rm -rf "$STATIC" && mv "$STATIC.tmp" "$STATIC"
  mv -f "$out.tmp" "$out"
  echo "$want" >"$out.stamp"
  rm -rf "$gocache"
  GOTOOLCHAIN=local "$go" clean -modcache
  rm -rf "$GOMODCACHE"
  echo "build.sh: built gitea in $((SECONDS - start))s" >&2
fi

echo "GITEA_BIN=$out"
echo "GITEA_STATIC=$STATIC"
