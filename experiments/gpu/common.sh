# Sourced by the GPU scripts here: the carried wheels of the CLI's pure-Python dependencies (the GPU
# image lacks them) go to /tmp/site, as the device README says; the source tree and the carried data
# are used in place; $R collects the rows that come back in $OUT/results.tgz.
#   pip download --no-deps -d .gpu_data/wheels jsonargparse==4.53.0 omegaconf==2.4.0
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu_data/wheels/*.whl \
  || echo "no wheels carried: the CLI may not start"
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1 TFAMILY_DATA=$PWD/.gpu_data TFAMILY_NATIVE=0
T="python3 -m tfamily.cli"
R=/tmp/gpu_results; mkdir -p $R
