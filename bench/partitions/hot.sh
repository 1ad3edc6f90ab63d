#!/bin/sh
# Mean latency (ms) of each hot-path statement in hot/, prepared (pgbench -M prepared, as
# psycopg sends them) and planned generically as the engine's connections do
# (plan_cache_mode = force_generic_plan), then with a custom plan each call (auto), on the
# schemas made by schema.sql.  ./hot.sh partspike_hot "flat p30 p90" [seconds]
db=$1; schemas=$2; t=${3:-5}
# MODES="force_generic_plan" for the engine's mode alone
for mode in ${MODES:-force_generic_plan force_custom_plan}; do
  for q in hot/*.sql; do
    for s in $schemas; do
      lat=$(PGOPTIONS="-c search_path=$s -c plan_cache_mode=$mode -c jit=off" \
        pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 1 -T "$t" -f "$q" "$db" 2>/dev/null \
        | awk '/latency average/ {print $4}')
      printf '%s\t%s\t%s\t%s ms\n' "$mode" "$(basename "$q" .sql)" "$s" "$lat"
    done
  done
done
