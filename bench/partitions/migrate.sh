#!/bin/sh
# The online migration of migrate/0_legacy.sql's tables, step by step, while an old
# worker's update loop (migrate/old_worker.sql, 2 clients) runs beside it: each step's
# time, and the count, p99 and max latency of the updates that began during it.
# ./migrate.sh partspike_mig m [seconds of updates, 60]
#   (after: psql -v s=m -v n=1000000 -f migrate/0_legacy.sql)
db=$1; s=$2; t=${3:-60}; dir=$(mktemp -d); here=$(pwd)
(cd "$dir" && PGOPTIONS="-c search_path=$s -c plan_cache_mode=force_generic_plan" \
  exec pgbench -h 127.0.0.1 -U postgres -n -M prepared -c 2 -T "$t" -l \
  -f "$here/migrate/old_worker.sql" "$db" > "$dir/out" 2>&1) &
bench=$!
start=$(date +%s%N)
sleep 3
echo "before $start $(date +%s%N)" >> "$dir/steps"
for step in 1_columns 2_indexes 3_checks 4_parents 5_cutover; do
  began=$(date +%s%N)
  psql -h 127.0.0.1 -U postgres -d "$db" -q -v s="$s" -f "migrate/$step.sql" >/dev/null \
    || { echo "$step failed"; break; }
  ended=$(date +%s%N)
  echo "$step $began $ended" >> "$dir/steps"
done
last=$(date +%s%N)
wait $bench  # the steps must end within the $t seconds
echo "after $last $(date +%s%N)" >> "$dir/steps"
grep -i "error\|abort" "$dir/out"
while read -r step began ended; do
  cat "$dir"/pgbench_log.* | awk -v b="$began" -v e="$ended" '
    { t = ($5 * 1000000 + $6) * 1000 - $3 * 1000; if (t >= b && t < e) print $3 / 1000 }' \
  | sort -n | awk -v step="$step" -v ms="$(( (ended - began) / 1000000 ))" '
    {v[NR] = $1} END {printf "%-10s %6d ms  updates %6d  p99 %7.2f ms  max %7.2f ms\n",
    step, ms, NR, v[int(NR * 0.99) + (NR < 100)], v[NR]}'
done < "$dir/steps"
rm -r "$dir"
