#!/usr/bin/env bash
# Apply the CRD fixtures to the server started by start.sh DIR and wait until
# each CRD is Established.
#   install-crds.sh DIR SHARED   (SHARED: the shared/ dir, holding
#                                 fixtures/crds/, or a directory of CRD YAMLs)
# CI passes ../shared. The CRDs are read in place, never copied.
# Uses kubectl from $KUBECTL or PATH.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: install-crds.sh DIR SHARED_DIR" >&2; exit 2; }
DIR=$1 SRC=$2
KUBECTL=${KUBECTL:-kubectl}
die() { echo "install-crds.sh: $*" >&2; exit 1; }

[[ -f $DIR/kubeconfig ]] || die "no $DIR/kubeconfig (run start.sh $DIR first)"
if [[ -d $SRC/fixtures/crds ]]; then SRC=$SRC/fixtures/crds; fi
compgen -G "$SRC/*.yaml" >/dev/null || die "no *.yaml CRDs in $SRC"
command -v "$KUBECTL" >/dev/null || die "kubectl not found (set KUBECTL=)"

k() { "$KUBECTL" --kubeconfig "$DIR/kubeconfig" "$@"; }
out=$(k apply --server-side --field-manager=lockstep-test -f "$SRC" -o name 2>&1) ||
  die "kubectl apply failed: $out"
mapfile -t crds < <(grep '^customresourcedefinition' <<<"$out")
[[ ${#crds[@]} -gt 0 ]] || die "kubectl apply created no CRDs: $out"
out=$(k wait --for=condition=Established --timeout=60s "${crds[@]}" 2>&1) ||
  die "CRDs not Established within 60s: $out"
