#!/usr/bin/env bash
# Runs lockstep's fuzz targets (cargo fuzz, libFuzzer) for a bounded time.
#
#   bash fuzz/run.sh [TARGETS] [SECONDS]
#
#   TARGETS  comma-separated names, or "all" (default): manifest, release,
#            live, webhook, config, plans
#   SECONDS  per target (default 15)
#
#   LOCKSTEP_FUZZ_RUNS=N       run each target for N executions instead of
#                              SECONDS (the long run: N=10000000 is about 80
#                              minutes for all six, most of it manifest and live)
#   LOCKSTEP_FUZZ_SANITIZER=S  none (default) or address; see CONTRIBUTING.md
#
# Installs nightly Rust (minimal profile) and cargo-fuzz when missing. The
# corpus each target grows is kept in fuzz/corpus/<target> (not committed);
# the committed seeds in fuzz/seeds/<target> and files of this repository
# (examples/fleet, plans/, deploy/) are where it starts. A crash, panic,
# failed assertion, timeout or out-of-memory is written to
# fuzz/artifacts/<target>/ and fails the script (after every target has run).
set -euo pipefail
cd "$(dirname "$0")/.."

all=(manifest release live webhook config plans)
targets="${1:-all}"
seconds="${2:-15}"
sanitizer="${LOCKSTEP_FUZZ_SANITIZER:-none}"
if [ "$targets" = all ]; then
  targets=("${all[@]}")
else
  IFS=, read -r -a targets <<<"$targets"
fi
for t in "${targets[@]}"; do
  case " ${all[*]} " in *" $t "*) ;; *) echo "unknown fuzz target: $t (have: ${all[*]})" >&2; exit 2 ;; esac
done

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

# One build for every target; cargo fuzz's defaults otherwise (optimised,
# debug assertions and overflow checks on, -Cpanic=abort, one codegen unit).
start=$(date +%s)
cargo +nightly fuzz build --sanitizer "$sanitizer"
echo "fuzz build: $(($(date +%s) - start)) s (sanitizer $sanitizer)"
bin="fuzz/target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"

# Seeds from the repository's own files, refreshed each run.
seed() { # target files...
  local dir="fuzz/corpus/$1" f
  shift
  mkdir -p "$dir"
  for f in "$@"; do
    [ -f "$f" ] && cp "$f" "$dir/repo-${f//\//_}"
  done
  return 0
}
shopt -s nullglob globstar
fleet=(examples/fleet/**/*.yaml plans/samples/*.yaml)
seed manifest "${fleet[@]}" deploy/*.yaml
seed plans "${fleet[@]}"
seed live examples/fleet/**/*.yaml
seed config plans/lockstep-config.*.yaml
seed release
seed webhook
# GitHub's own example payloads, when the GitHub peer is installed (npm ci).
examples=tests/peers/github/node_modules/@octokit/webhooks-examples/api.github.com/index.json
if [ -f "$examples" ] && command -v jq >/dev/null 2>&1; then
  for event in push pull_request; do
    jq -c --arg e "$event" 'limit(3; .[] | select(.name == $e) | .examples[])' "$examples" |
      while IFS= read -r body; do
        h=$(printf '%s' "$body" | sha1sum | cut -c1-12)
        printf 'github\nx-github-event: %s\nx-github-delivery: %s\n\n%s\n' "$event" "$h" "$body" \
          >"fuzz/corpus/webhook/octokit-$event-$h"
      done
  done
fi

dict() {
  case "$1" in
    webhook) echo fuzz/dict/webhook.dict ;;
    release) echo fuzz/dict/release.dict ;;
    *) echo fuzz/dict/yaml.dict ;;
  esac
}

if [ -n "${LOCKSTEP_FUZZ_RUNS:-}" ]; then
  budget=(-runs="$LOCKSTEP_FUZZ_RUNS")
else
  budget=(-max_total_time="$seconds")
fi
failed=()
for t in "${targets[@]}"; do
  echo "== fuzz $t (${budget[*]}) =="
  start=$(date +%s)
  # -timeout: one input taking over 10 s is a finding (a parser must not
  # hang on a file a stranger wrote); -rss_limit_mb likewise for memory.
  # The binary the build above made (cargo fuzz run would rebuild first if
  # the tree changed meanwhile); flags as cargo fuzz run passes them.
  mkdir -p "fuzz/artifacts/$t"
  if "$bin/$t" -artifact_prefix="fuzz/artifacts/$t/" -dict="$(dict "$t")" "${budget[@]}" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "fuzz/corpus/$t" "fuzz/seeds/$t" 2>"fuzz/corpus/$t.log"; then
    grep -aE '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added)' "fuzz/corpus/$t.log" || true
    echo "fuzz $t: ok in $(($(date +%s) - start)) s"
  else
    tail -n 40 "fuzz/corpus/$t.log" >&2
    failed+=("$t")
  fi
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: ${failed[*]} failed; inputs in fuzz/artifacts/<target>/." >&2
  echo "  reproduce: cargo +nightly fuzz run --sanitizer $sanitizer <target> fuzz/artifacts/<target>/<file>" >&2
  echo "  minimize:  cargo +nightly fuzz tmin --sanitizer $sanitizer <target> fuzz/artifacts/<target>/<file>" >&2
  exit 1
fi
