#!/usr/bin/env bash
# The cuda backend finds every driver function it calls by the exported symbol of the prototype it calls it
# with (GPOOL_DRIVER_FUNCTIONS in server/worker/cuda_backend_class.h). Checked against the CUDA toolkit's stub driver, which exports every
# symbol of its version's driver and answers every call with an error: loading must get past all symbols
# and stop at cuInit ("reports no usable device"), not at a function "the driver does not provide".
# usage: driver_symbols.sh GPOOL_WORKER [CUDA_ROOT]
set -u
worker=$1; cuda=${2:-/usr/local/cuda}
stub=$cuda/lib64/stubs/libcuda.so
[ -f "$stub" ] || { echo "no stub driver at $stub: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ln -s "$stub" "$dir/libcuda.so.1"
out=$(LD_LIBRARY_PATH=$dir "$worker" --probe 2>&1)
echo "$out"
[ "$out" = "the driver loaded but reports no usable device" ]
