# Shared by the peers' build scripts (sourced): the Go toolchain to build with.
# GO=/path/to/go wins, then go on PATH, then /usr/local/go/bin/go.

die() { echo "build.sh: $*" >&2; exit 1; }

find_go() {
  if [[ -n ${GO:-} ]]; then echo "$GO"; return; fi
  if command -v go >/dev/null 2>&1; then command -v go; return; fi
  if [[ -x /usr/local/go/bin/go ]]; then echo /usr/local/go/bin/go; return; fi
  die "no Go toolchain found (set GO=/path/to/go; Go >= 1.26.2 is needed)"
}
