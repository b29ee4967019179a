#!/usr/bin/env bash
# The soak (issue #34): the suite run N times in a row, each beside a CPU hog (stress-ng --cpu 2 by
# default, Debian's), as CI's loaded 2-core machine runs it, so a race shows here before it shows
# there. Prints each failure with its test id as it happens, and a tally at the end; exits 1 when any
# run failed.
#
#   scripts/soak.sh [PYTEST ARGS...]        # e.g. scripts/soak.sh -k cordon (default: the suite)
#   make soak SOAK_RUNS=3 SOAK_ARGS="-k cordon"
#
# Environment: SOAK_RUNS (3), SOAK_HOG_CPUS (2; 0: no hog), TEST_WORKERS (8, as `make test`),
# SOAK_DIR (where each run's log and time table go; a new temporary directory by default).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/apt-missing.sh

runs=${SOAK_RUNS:-3}
hog_cpus=${SOAK_HOG_CPUS:-2}
workers=${TEST_WORKERS:-8}
dir=${SOAK_DIR:-$(mktemp -d -t slurm-sidecars-soak.XXXXXX)}
mkdir -p "$dir"
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "soak: SOAK_RUNS must be a positive integer, not '$runs'" >&2; exit 2; }
[[ $hog_cpus =~ ^[0-9]+$ ]] || { echo "soak: SOAK_HOG_CPUS must be an integer, not '$hog_cpus'" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "soak: no .venv here: run 'make setup' first" >&2; exit 2; }
if [ "$hog_cpus" -gt 0 ]; then
  apt_missing soak stress-ng || { echo "soak: stress-ng could not be installed" >&2; exit 2; }
fi

hog=""
stop_hog() {
  if [ -n "$hog" ]; then
    kill -TERM "$hog" 2>/dev/null
    wait "$hog" 2>/dev/null
    hog=""
  fi
}
trap stop_hog EXIT
trap 'stop_hog; exit 130' INT TERM

declare -A count=()
failed_runs=0
echo "soak: $runs run(s), hog: stress-ng --cpu $hog_cpus, $workers worker(s), logs in $dir"
for ((i = 1; i <= runs; i++)); do
  log="$dir/run-$i.log"
  if [ "$hog_cpus" -gt 0 ]; then
    stress-ng --cpu "$hog_cpus" --quiet >/dev/null 2>&1 &
    hog=$!
  fi
  start=$(date +%s)
  PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX="$HOME/.cache/slurm-sidecars/pycache" \
    .venv/bin/python -m pytest -n "$workers" --dist worksteal -m "not containers" -rfE -p no:randomly \
    --time-table-file "$dir/run-$i-time.txt" \
    "$@" >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  stop_hog
  # pytest's short summary: one "FAILED <test id> - why" / "ERROR <test id> - why" line each
  mapfile -t bad < <(grep -E '^(FAILED|ERROR) ' "$log" | sed -E 's/ - .*$//')
  summary=$(grep -E '^=+ .*(passed|failed|error|no tests ran).* in [0-9.]+s' "$log" | tail -1 | sed -E 's/^=+ | =+$//g')
  if [ "$rc" -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
    bad=("RUN $i: pytest exited $rc without a failed test (see $log)")
  fi
  if [ ${#bad[@]} -gt 0 ]; then
    failed_runs=$((failed_runs + 1))
  fi
  echo "soak: run $i/$runs: exit $rc in ${took}s: ${summary:-no summary}"
  for b in "${bad[@]}"; do
    echo "soak:   $b"
    count[$b]=$((${count[$b]:-0} + 1))
  done
done

echo "soak: tally: $((runs - failed_runs)) of $runs run(s) passed"
for b in "${!count[@]}"; do
  printf 'soak:   %dx %s\n' "${count[$b]}" "$b"
done | sort -t x -k1,1nr
[ "$failed_runs" -eq 0 ]
