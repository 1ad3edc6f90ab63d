#!/usr/bin/env bash
# durably against DBOS Transact 3.4 on the same PostgreSQL, in alternation (A B A B ...), so
# each ratio comes from one run while the machine's speed drifts. DBOS is installed into
# $PEERS_DIR as ../shared/bench/side-by-side.sh does; its scripts are the project's own
# (bench/peers/), run on the peers' Python; nothing of DBOS enters the project.
#
# usage (from the project root):
#   bash bench/dbos-side-by-side.sh stream  [n=50] [gap_ms=100] [values=900] [pairs=3]
#        commit -> a waiting reader's yield (issue 28's figure); write -> yield, values/s beside
#        (values < 1000: each workflow write is a step, and a run takes 1000 at most)
#   bash bench/dbos-side-by-side.sh latency [n=20] [gap_ms=1500] [pairs=3]
#        start -> completed; DBOS in process (start_workflow) and through DBOSClient.enqueue
#   bash bench/dbos-side-by-side.sh signal  [n=20] [gap_ms=1500] [pairs=3]
#        send -> the waiting run completed (DBOS: send -> recv)
set -euo pipefail
MODE=${1:?mode: stream|latency|signal}
HERE=$(cd "$(dirname "$0")" && pwd)
PEERS=${PEERS_DIR:-$(dirname "$(mktemp -u)")/durably-peers}
BASE=${PGURL_BASE:-postgresql://postgres@127.0.0.1:5432}
if [ ! -x "$PEERS/dbos-venv/bin/python" ]; then
  python3 -m venv "$PEERS/dbos-venv"
  "$PEERS/dbos-venv/bin/pip" install -q dbos==3.4.0 'psycopg[binary]'
fi
for db in bench_durably bench_dbos; do psql "$BASE/postgres" -qc "CREATE DATABASE $db" 2>/dev/null || true; done
dbos() { (cd /tmp && DBOS_URL="$BASE/bench_dbos" "$PEERS/dbos-venv/bin/python" "$HERE/peers/$1" "${@:2}" 2>/dev/null); }
pick() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(*(eval('d'+k) for k in sys.argv[1:]))" "$@"; }
ratio() { python3 -c "print(round($1/$2, 3))"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

case "$MODE" in
  stream)
    N=${2:-50}; G=${3:-100}; V=${4:-900}; P=${5:-3}
    keys=("['commit_to_yield_ms']['median']" "['commit_to_yield_ms']['p99']" "['write_to_yield_ms']['median']" "['values_per_s']")
    ratios=()
    for i in $(seq 1 "$P"); do
      read -r me me99 mew mev < <(uv run python -m bench stream --n "$N" --gap-ms "$G" --runs "$V" --database "$BASE/bench_durably" | pick "${keys[@]}")
      read -r db db99 dbw dbv < <(dbos dbos_stream.py "$N" "$G" "$V" | pick "${keys[@]}")
      r=$(ratio "$me" "$db"); ratios+=("$r")
      echo "pair $i: commit->yield p50 durably=$me dbos=$db ratio=$r (p99 $me99 / $db99) | write->yield p50 $mew / $dbw | values/s $mev / $dbv"
    done
    echo "median durably/dbos commit->yield p50 (lower is better): $(median "${ratios[@]}")" ;;
  latency|signal)
    N=${2:-20}; G=${3:-1500}; P=${4:-3}
    key="['client_ms']['median']"
    ratios=(); client_ratios=()
    for i in $(seq 1 "$P"); do
      me=$(uv run python -m bench "$MODE" --n "$N" --gap-ms "$G" --database "$BASE/bench_durably" | pick "$key")
      db=$(dbos dbos_latency.py "$MODE" "$N" "$G" | pick "$key")
      r=$(ratio "$me" "$db"); ratios+=("$r")
      line="pair $i: $MODE p50 durably=$me dbos=$db ratio=$r"
      if [ "$MODE" = latency ]; then
        dc=$(dbos dbos_latency.py client "$N" "$G" | pick "$key")
        rc=$(ratio "$me" "$dc"); client_ratios+=("$rc")
        line="$line | dbos through DBOSClient=$dc ratio=$rc"
      fi
      echo "$line"
    done
    echo "median durably/dbos $MODE p50 (lower is better): $(median "${ratios[@]}")"
    if [ "$MODE" = latency ]; then
      echo "median durably/dbos-through-DBOSClient latency p50: $(median "${client_ratios[@]}")"
    fi ;;
  *) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
