# the arena-cpu grid as two one-thread shards (one per core), then one unsharded pass that finds every
# cell done and times every member alternating (the speed and memory columns); rerun to resume
export TFAMILY_DATA=/work/shared/data
cd /work/main
date -u +"start %FT%TZ"
nice -n 5 .venv/bin/tfamily arena --preset arena-cpu --out runs/arena/cpu --shard 0/2 > runs/arena/cpu-shard0.log 2>&1 &
A=$!
nice -n 5 .venv/bin/tfamily arena --preset arena-cpu --out runs/arena/cpu --shard 1/2 > runs/arena/cpu-shard1.log 2>&1 &
B=$!
wait $A; echo "shard0 rc $?"; wait $B; echo "shard1 rc $?"
date -u +"shards done %FT%TZ"
nice -n 5 .venv/bin/tfamily arena --preset arena-cpu --out runs/arena/cpu > runs/arena/cpu-final.log 2>&1
echo "final rc $?"
date -u +"end %FT%TZ"
