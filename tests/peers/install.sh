#!/usr/bin/env bash
# Installs the real peers the tests start and stop themselves:
#  - OpenSSH's sshd and ssh-keygen (Debian packages), for Git over ssh;
#  - github/: Prism serving GitHub's OpenAPI description, GitHub's webhook
#    examples (npm, versions pinned in its package-lock.json);
#  - kube/: kube-apiserver and etcd built from the Go module proxy (versions
#    pinned in its go.mod files; cached in ~/.cache/lockstep-kube, so only the
#    first run builds: about 7 minutes on 2 cores);
#  - Debian's chromium, headless, for tests/ui_browser.rs;
#  - mariadb/: mariadb-operator's Backup CRD (the backup gate's tests), from
#    the Go module proxy, checked against a pinned SHA-256 and cached in
#    ~/.cache/lockstep-kube/crds (curl + unzip);
#  - gitea/: Gitea built from the Go module proxy with sqlite (cgo; cached in
#    ~/.cache/lockstep-gitea, the first build about 10 minutes on 2 cores).
# Idempotent; quiet on success but for one line per peer.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

need() { command -v "$1" >/dev/null 2>&1; }
missing=()
# gpg: OpenPGP-signed commits in tests/trust.rs.
# chromium: the dashboard in a real browser (tests/ui_browser.rs).
for tool in node npm curl unzip openssl kubectl ssh-keygen gpg gcc chromium; do need "$tool" || missing+=("$tool"); done
# OpenSSH's server for Git over ssh (tests/common/sshd.rs); not on a user's PATH.
[[ -x ${LOCKSTEP_SSHD:-/usr/sbin/sshd} ]] || missing+=(sshd)
if ((${#missing[@]})); then
  if [[ $(id -u) == 0 ]] && need apt-get; then
    pkgs=()
    for t in "${missing[@]}"; do
      case $t in
        node) pkgs+=(nodejs) ;;
        ssh-keygen) pkgs+=(openssh-client) ;;
        gpg) pkgs+=(gnupg) ;;
        sshd) pkgs+=(openssh-server) ;;
        *) pkgs+=("$t") ;;
      esac
    done
    # Packages with services (openssh-server) must not start them: the
    # tests run their own servers, on 127.0.0.1 only.
    guard=/usr/sbin/policy-rc.d
    if [[ ! -e $guard ]]; then
      printf '#!/bin/sh\nexit 101\n' >"$guard" && chmod +x "$guard"
      trap 'rm -f "$guard"' EXIT
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  else
    echo "install.sh: missing tools: ${missing[*]}" >&2
    exit 1
  fi
fi

if [[ ! -d $here/github/node_modules/@stoplight/prism-cli ]] || [[ $here/github/package-lock.json -nt $here/github/node_modules ]]; then
  npm ci --prefix "$here/github" --no-audit --no-fund --loglevel=error >/dev/null
fi
echo "github peer: ready ($here/github)"

bins=$(bash "$here/kube/build.sh")
echo "kube peer: ready ($(echo "$bins" | tr '\n' ' '))"

crd=$(bash "$here/mariadb/fetch-crd.sh")
echo "mariadb Backup CRD: ready ($crd)"

gitea=$(bash "$here/gitea/build.sh")
echo "gitea peer: ready ($(echo "$gitea" | tr '\n' ' '))"
