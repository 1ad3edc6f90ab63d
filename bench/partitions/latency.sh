#!/bin/sh
# Claim latency while a command runs: pgbench runs hot/claim.sql (prepared, generic plan)
# on schema $2 for $3 seconds; $4 (a psql script) starts after 2 s. Prints the command's
# own output, then the count, p50, p99 and max claim latency of the window, in ms, and
# the 3 slowest claims with the epoch second each began.
# ./latency.sh partspike_purge pp 30 detach_drop.sql   (an empty $4: claims alone)
db=$1; s=$2; t=$3; script=$4; dir=$(mktemp -d)
(cd "$dir" && PGOPTIONS="-c search_path=$s -c plan_cache_mode=force_generic_plan -c jit=off" \
  pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 1 -T "$t" -l \
  -f "$OLDPWD/hot/claim.sql" "$db" >/dev/null 2>&1) &
bench=$!
if [ -n "$script" ]; then
  sleep 2
  psql -h 127.0.0.1 -U postgres -d "$db" -v s="$s" -f "$script"
fi
wait $bench
cat "$dir"/pgbench_log.* | awk '{print $3 / 1000}' | sort -n | awk '
  {v[NR] = $1} END {printf "claims %d  p50 %.2f ms  p99 %.2f ms  max %.2f ms\n",
  NR, v[int(NR * 0.5)], v[int(NR * 0.99)], v[NR]}'
cat "$dir"/pgbench_log.* | awk '{printf "%.2f ms at %.3f\n", $3 / 1000, $5 + $6 / 1e6 - $3 / 1e6}' \
  | sort -rn | head -3
rm -r "$dir"
