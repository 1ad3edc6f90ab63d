#!/usr/bin/env bash
# Streams side by side: `python -m bench stream` against DBOS 3.4's write_stream/read_stream
# (bench/peers/dbos_stream.py) on the same PostgreSQL, in alternation (A B A B ...), so the
# ratio holds while the machine's speed drifts. DBOS is installed into $PEERS_DIR as
# ../shared/bench/side-by-side.sh does; nothing of it enters the project.
#
# usage (from the project root): bash bench/stream-side-by-side.sh [n=50] [gap_ms=100] [values=900] [pairs=3]
# (values < 1000: each workflow write is a step, and a run takes 1000 step attempts at most)
set -euo pipefail
N=${1:-50}; G=${2:-100}; V=${3:-900}; P=${4:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
PEERS=${PEERS_DIR:-$(dirname "$(mktemp -u)")/durably-peers}
BASE=${PGURL_BASE:-postgresql://postgres@127.0.0.1:5432}
if [ ! -x "$PEERS/dbos-venv/bin/python" ]; then
  python3 -m venv "$PEERS/dbos-venv"
  "$PEERS/dbos-venv/bin/pip" install -q dbos==3.4.0 'psycopg[binary]'
fi
for db in bench_durably bench_dbos; do psql "$BASE/postgres" -qc "CREATE DATABASE $db" 2>/dev/null || true; done
# The issue's figure is commit -> yield (the write's return to the reader's yield); write ->
# yield (the commit included) beside it.
last() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); c=d['commit_to_yield_ms']; w=d['write_to_yield_ms']; print(c['median'], c['p99'], w['median'], d['values_per_s'])"; }
ratios=()
for i in $(seq 1 "$P"); do
  read -r me me99 mew mev < <(uv run python -m bench stream --n "$N" --gap-ms "$G" --runs "$V" --database "$BASE/bench_durably" | last)
  read -r db db99 dbw dbv < <(cd /tmp && DBOS_URL="$BASE/bench_dbos" "$PEERS/dbos-venv/bin/python" "$HERE/peers/dbos_stream.py" "$N" "$G" "$V" 2>/dev/null | last)
  r=$(python3 -c "print(round($me/$db, 3))")
  ratios+=("$r")
  echo "pair $i: commit->yield p50 durably=$me dbos=$db ratio=$r (p99 $me99 / $db99) | write->yield p50 $mew / $dbw | values/s $mev / $dbv"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "median durably/dbos commit->yield p50 (lower is better): $median"
