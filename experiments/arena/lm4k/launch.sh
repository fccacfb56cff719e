export TFAMILY_DATA=/work/shared/data
cd /work/main
A="--tasks lm --length lm=4096 --steps 200 --batch-size 4 --lr 2e-3 --eval-examples 16 --threads 1 --out runs/arena/lm4k"
date -u +"start %FT%TZ"
nice -n 5 .venv/bin/tfamily arena $A --shard 0/2 > runs/arena/lm4k-shard0.log 2>&1 &
P0=$!
nice -n 5 .venv/bin/tfamily arena $A --shard 1/2 > runs/arena/lm4k-shard1.log 2>&1 &
P1=$!
wait $P0; echo "shard0 rc $?"; wait $P1; echo "shard1 rc $?"
nice -n 5 .venv/bin/tfamily arena $A > runs/arena/lm4k-final.log 2>&1
echo "final rc $?"
date -u +"end %FT%TZ"
