#!/usr/bin/env bash
# End-to-end check of the peer: start, install CRDs, exercise the API, stop.
#   smoke.sh SHARED_DIR [WORK_DIR]
# SHARED_DIR as for install-crds.sh (CI: ../shared). WORK_DIR defaults to a
# temp dir, removed afterwards. Prints one line per check and a closing
# "N passed, N failed" line; exits non-zero if any check failed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EX=$(cd "$HERE/../../../examples/fleet" && pwd)
[[ $# -ge 1 ]] || { echo "usage: smoke.sh SHARED_DIR [WORK_DIR]" >&2; exit 2; }
SHARED=$1
if [[ $# -ge 2 ]]; then DIR=$2; KEEP=1; else DIR=$(mktemp -d); KEEP=0; fi
KUBECTL=${KUBECTL:-kubectl}

cleanup() { "$HERE/stop.sh" "$DIR" || true; [[ $KEEP == 1 ]] || rm -rf "$DIR"; }
trap cleanup EXIT

"$HERE/start.sh" "$DIR" --crds "$SHARED"
k() { "$KUBECTL" --kubeconfig "$DIR/kubeconfig" "$@"; }
apply() { k apply --server-side --field-manager=lockstep "$@"; }

pass=0 fail=0
check() { # description command...
  local d=$1; shift
  local out
  if out=$("$@" 2>&1); then pass=$((pass + 1)); echo "ok   $d"
  else fail=$((fail + 1)); echo "FAIL $d"; sed 's/^/     /' <<<"$out"; fi
}
expect_reject() { # message manifest-text
  local out
  if out=$(apply -f - <<<"$2" 2>&1); then echo "accepted unexpectedly: $out"; return 1; fi
  grep -qF "$1" <<<"$out" || { echo "rejected with another error: $out"; return 1; }
}
equals() { local got; got=$("${@:2}"); [[ $got == "$1" ]] || { echo "got '$got', want '$1'"; return 1; }; }

NOVA=$EX/standalone/compute/nova.yaml
CP=$EX/clusters/prod/controlplane.yaml
check "namespaces" apply -f "$EX/platform/namespaces.yaml"
check "Nova from examples" apply -f "$NOVA"
check "ControlPlane from examples" apply -f "$CP"
both=$(sed -e 's/^  name: nova$/  name: nova-both/' \
  -e 's|^    tag: "2026.1".*|    tag: "2026.1"\n    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef|' "$NOVA")
check "CEL rejects Nova with tag and digest" \
  expect_reject "exactly one of image.tag or image.digest must be set" "$both"
nodefault=$(sed 's/isDefault: true.*/isDefault: false/' "$CP")
check "CEL rejects ControlPlane without default glance backend" \
  expect_reject "exactly one backends entry must set isDefault" "$nodefault"
badpat=$(sed -e 's/^  name: nova$/  name: nova-pat/' -e 's|^    tag: "2026.1".*|    digest: sha256:xyz|' "$NOVA")
check "OpenAPI pattern rejects a bad digest" expect_reject "should match" "$badpat"
check "Nova status subresource patch" k -n compute patch nova nova --subresource=status \
  --type=merge -p '{"status":{"installedRelease":"2026.1"}}'
check "Nova status reads back" equals 2026.1 \
  k -n compute get nova nova -o 'jsonpath={.status.installedRelease}'
check "batch/v1 Job, coordination.k8s.io/v1 Lease, events.k8s.io/v1 Event" apply -f - <<'EOF'
apiVersion: batch/v1
kind: Job
metadata: {name: nova-db-sync, namespace: compute}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: db-sync, image: ghcr.io/c5c3/nova:2026.1, command: ["true"]}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: lockstep, namespace: compute}
spec: {holderIdentity: lockstep-test, leaseDurationSeconds: 15}
---
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: nova.upgrade.1, namespace: compute}
eventTime: "2026-01-01T00:00:00.000000Z"
reportingController: lockstep.io/controller
reportingInstance: lockstep-test
action: Upgrade
reason: ReleaseBumped
type: Normal
note: bumped nova to 2026.1
regarding: {apiVersion: nova.openstack.c5c3.io/v1alpha1, kind: Nova, name: nova, namespace: compute}
EOF
check "Job marked Complete via status subresource (no job controller runs)" \
  k -n compute patch job nova-db-sync --subresource=status --type=merge -p \
  '{"status":{"startTime":"2026-01-01T00:00:00Z","completionTime":"2026-01-01T00:01:00Z","succeeded":1,"conditions":[{"type":"SuccessCriteriaMet","status":"True","reason":"CompletionsReached","message":"ok","lastTransitionTime":"2026-01-01T00:01:00Z"},{"type":"Complete","status":"True","reason":"CompletionsReached","message":"ok","lastTransitionTime":"2026-01-01T00:01:00Z"}]}}'

echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
