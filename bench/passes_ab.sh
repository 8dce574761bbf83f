#!/bin/bash
# Issue 34 item 2 A/B: a reference checkout (main) vs this checkout (numba) vs this checkout (NumPy route),
# W1 1M on a plain LocalCluster(2 x 1), each run in its own process with the 2-process NumPy floor
# (bench_speed --part passes); the order rotates each round.  Usage: bench/passes_ab.sh REF_CHECKOUT [N] [TAG]
# JSON: bench/results/passes_1m_[TAG_]{main,branch,branch-numpy}_r{0,1,2}.json
set -e
cd "$(dirname "$0")"
REF=$(realpath "$1"); N=${2:-1000000}; TAG=${3:+$3_}
kinds=(main branch branch-numpy)
for r in 0 1 2; do
  for i in 0 1 2; do
    k=${kinds[$(( (i + r) % 3 ))]}
    out=results/passes_1m_${TAG}${k}_r$r.json
    case $k in
      main) env PYTHONPATH="$REF" nice -n 10 ../.venv/bin/python bench_speed.py --part passes --n "$N" --repeats 1 > "$out" ;;
      branch) nice -n 10 ../.venv/bin/python bench_speed.py --part passes --n "$N" --repeats 1 > "$out" ;;
      branch-numpy) env MKDIST_NUMBA=0 nice -n 10 ../.venv/bin/python bench_speed.py --part passes --n "$N" --repeats 1 > "$out" ;;
    esac
    echo "round $r: $k done $(date +%T)"
  done
done
