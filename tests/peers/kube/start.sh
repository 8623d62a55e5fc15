#!/usr/bin/env bash
# Start a real etcd + kube-apiserver on 127.0.0.1 for integration tests.
#
#   start.sh DIR [--port N] [--etcd-port N] [--crds SHARED_OR_CRD_DIR]
#                [--timeout SECONDS]
#
# DIR gets: certificates (reused if present), etcd-data/ (always fresh),
# etcd.log, kube-apiserver.log, etcd.pid, kube-apiserver.pid, kubeconfig
# (admin, client cert in group system:masters) and env (KUBECONFIG,
# KUBE_APISERVER_URL, ETCD_URL; sourceable). Ports default to free random ones.
# Exits 0 once /readyz answers "ok", leaving both processes running; stop
# them with stop.sh DIR. With --crds, install-crds.sh runs afterwards.
# Binaries come from $KUBE_APISERVER_BIN/$ETCD_BIN if set, else build.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "start.sh: $*" >&2; exit 1; }

[[ $# -ge 1 && $1 != -* ]] || usage
DIR=$1; shift
API_PORT='' ETCD_PORT='' CRDS='' TIMEOUT=120
while [[ $# -gt 0 ]]; do
  case $1 in
    --port) API_PORT=$2; shift 2 ;;
    --etcd-port) ETCD_PORT=$2; shift 2 ;;
    --crds) CRDS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    *) usage ;;
  esac
done

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

for f in "$DIR"/etcd.pid "$DIR"/kube-apiserver.pid; do
  if [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null; then
    die "$(basename "$f" .pid) already running (pid $(cat "$f")); run stop.sh $DIR first"
  fi
done

if [[ -z ${KUBE_APISERVER_BIN:-} || -z ${ETCD_BIN:-} ]]; then
  eval "$("$HERE/build.sh")"
fi
[[ -x $KUBE_APISERVER_BIN ]] || die "kube-apiserver not executable: $KUBE_APISERVER_BIN"
[[ -x $ETCD_BIN ]] || die "etcd not executable: $ETCD_BIN"

# ---- ports ---------------------------------------------------------------
port_in_use() {
  if command -v ss >/dev/null 2>&1; then
    ss -Htln "sport = :$1" 2>/dev/null | grep -q .
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}
# Random ports are drawn below the kernel's ephemeral range, so an outgoing
# connection elsewhere on the machine cannot take one between our check and
# etcd's bind; a bind that still loses a race is retried with fresh ports.
EPHEMERAL_LO=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
if (( EPHEMERAL_LO > 12000 )); then PORT_LO=10000 PORT_SPAN=$((EPHEMERAL_LO - 10000))
else PORT_LO=61000 PORT_SPAN=4000; fi
free_port() {
  local p taken=" $* "
  for _ in $(seq 1 200); do
    p=$((PORT_LO + RANDOM % PORT_SPAN))
    [[ $taken == *" $p "* ]] && continue
    port_in_use "$p" || { echo "$p"; return; }
  done
  die "no free port found"
}
FIXED_ETCD_PORT=$ETCD_PORT FIXED_API_PORT=$API_PORT
pick_ports() {
  ETCD_PORT=${FIXED_ETCD_PORT:-$(free_port)}
  ETCD_PEER_PORT=$(free_port "$ETCD_PORT")
  API_PORT=${FIXED_API_PORT:-$(free_port "$ETCD_PORT" "$ETCD_PEER_PORT")}
  for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT"; do
    port_in_use "$p" && die "port $p on 127.0.0.1 is already in use"
  done
  return 0
}

# ---- certificates ----------------------------------------------------------
gen_certs() {
  local d=$DIR/pki
  mkdir -p "$d"
  (
    cd "$d"
    umask 077
    ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
    ec ca.key
    openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=lockstep-test-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out ca.crt
    sign() { # name subject extfile-content
      ec "$1.key"
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
        -days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    sign admin "/O=system:masters/CN=lockstep-admin" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub
    rm -f ca.srl
  ) || die "certificate generation with openssl failed"
}
[[ -f $DIR/pki/admin.crt && -f $DIR/pki/sa.pub ]] || gen_certs
PKI=$DIR/pki

# ---- processes -------------------------------------------------------------
# Detached from the caller's session and stdio, so a caller capturing our
# output does not wait for the servers; the pid file holds the server's pid.
spawn() { # name cmd...
  local name=$1; shift
  rm -f "$DIR/$name.pid"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$DIR/$name.pid" "$@" \
    </dev/null >"$DIR/$name.log" 2>&1 &
  for _ in $(seq 1 50); do [[ -s $DIR/$name.pid ]] && return; sleep 0.1; done
  die "$name did not start"
}

stop_all() { "$HERE/stop.sh" "$DIR" >/dev/null 2>&1 || true; }

fail() { # name message
  echo "start.sh: $2" >&2
  for n in etcd kube-apiserver; do
    if [[ -f $DIR/$n.log ]]; then
      echo "---- last lines of $DIR/$n.log ----" >&2
      tail -n 25 "$DIR/$n.log" >&2
    fi
  done
  stop_all
  exit 1
}

alive() { [[ -f $DIR/$1.pid ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

# launch: 0 when ready, 3 when a port was taken under us (retry), else fails.
launch() {
rm -rf "$DIR/etcd-data"
ETCD_URL=http://127.0.0.1:$ETCD_PORT
spawn etcd env -u ETCD_BIN "$ETCD_BIN" \
  --name lockstep --data-dir "$DIR/etcd-data" \
  --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "lockstep=http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster-state new \
  --unsafe-no-fsync --log-level warn

deadline=$(( $(date +%s) + TIMEOUT ))
until curl -fsS -m 2 "$ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"'; do
  alive etcd || { port_race && return 3; fail etcd "etcd exited during startup"; }
  (( $(date +%s) < deadline )) || fail etcd "etcd not healthy within ${TIMEOUT}s"
  sleep 0.2
done

API_URL=https://127.0.0.1:$API_PORT
# No controller-manager runs: ServiceAccount admission is off (no token
# controller, no "default" ServiceAccount) and the endpoint reconciler is off
# (a loopback address is not a valid Endpoints address).
spawn kube-apiserver "$KUBE_APISERVER_BIN" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
  --etcd-servers="$ETCD_URL" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --authorization-mode=RBAC \
  --service-cluster-ip-range=10.96.0.0/24 \
  --disable-admission-plugins=ServiceAccount \
  --endpoint-reconciler-type=none \
  --profiling=false

until [[ $(curl -sS -m 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
             "$API_URL/readyz" 2>/dev/null) == ok ]]; do
  alive etcd || fail etcd "etcd exited while kube-apiserver was starting"
  alive kube-apiserver || { port_race && return 3; fail kube-apiserver "kube-apiserver exited during startup"; }
  (( $(date +%s) < deadline )) || fail kube-apiserver "kube-apiserver /readyz not ok within ${TIMEOUT}s"
  sleep 0.5
done
return 0
}

# A process died because a port went to someone else after we checked it.
port_race() {
  grep -qs 'address already in use' "$DIR/etcd.log" "$DIR/kube-apiserver.log" || return 1
  [[ -z $FIXED_ETCD_PORT && -z $FIXED_API_PORT ]]
}

T0=$(date +%s.%N)
for attempt in 1 2 3 4; do
  pick_ports
  rc=0; launch || rc=$?
  [[ $rc -eq 0 ]] && break
  echo "start.sh: a port was taken during startup (attempt $attempt); retrying with fresh ports" >&2
  stop_all
  rm -f "$DIR/etcd.log" "$DIR/kube-apiserver.log"
  [[ $attempt -lt 4 ]] || fail etcd "ports kept being taken during startup"
done
ready_s=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

cat >"$DIR/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lockstep-test
  cluster:
    server: $API_URL
    certificate-authority: $PKI/ca.crt
users:
- name: lockstep-admin
  user:
    client-certificate: $PKI/admin.crt
    client-key: $PKI/admin.key
contexts:
- name: lockstep-test
  context:
    cluster: lockstep-test
    user: lockstep-admin
current-context: lockstep-test
EOF
cat >"$DIR/env" <<EOF
KUBECONFIG=$DIR/kubeconfig
KUBE_APISERVER_URL=$API_URL
ETCD_URL=$ETCD_URL
EOF
echo "start.sh: ready in ${ready_s}s: $API_URL (KUBECONFIG=$DIR/kubeconfig)" >&2

if [[ -n $CRDS ]]; then
  "$HERE/install-crds.sh" "$DIR" "$CRDS" || { stop_all; exit 1; }
fi
