#!/bin/sh
# Throughput (tps, best of 3 x 3 s) of one statement at 8 clients on 2 cores: where the
# per-partition locking of generic plans shows as lost capacity, not latency.
# ./saturate.sh partspike_hot hot/get_pruned.sql "flat p6 p13 p30 p90"
db=$1; q=$2; schemas=$3
for s in $schemas; do
  best=0
  for r in 1 2 3; do
    tps=$(PGOPTIONS="-c search_path=$s -c plan_cache_mode=force_generic_plan -c jit=off" \
      pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 8 -j 2 -T 3 -f "$q" "$db" \
      2>/dev/null | awk '/^tps/ {printf "%d", $3}')
    [ "$tps" -gt "$best" ] && best=$tps
  done
  printf '%s\t%s\t%s tps\n' "$(basename "$q" .sql)" "$s" "$best"
done
