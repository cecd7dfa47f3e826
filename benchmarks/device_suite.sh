#!/usr/bin/env bash
# Everything that needs an accelerator, in one command, on a machine with a GPU (or NPU): the
# `device` tests of every package, then every benchmark on the best device. It installs nothing:
# the packages run from their sources on PYTHONPATH over the machine's own torch, so torch,
# pytest, hypothesis, numpy, protobuf and filelock must already be installed there.
#
#   bash benchmarks/device_suite.sh [--out DIR] [--only STEP[,STEP...]]
#
# Logs and JSON go to DIR (default benchmarks/results/device). --only runs the named steps alone
# (see STEPS below), e.g. to split the suite in two parts:
#   --only device_tests,decode_step,replay_overhead,pool_reuse,streams_overlap
#   --only static_kernel_warm_start,static_kernel_warm_start_compile
#
# Copy the tables into benchmarks/RESULTS.md with the device, torch version and date.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/benchmarks/results/device"
STEPS="device_tests decode_step replay_overhead pool_reuse streams_overlap static_kernel_warm_start static_kernel_warm_start_compile static_kernel_warm_start_aot vllm_serving"
only=""
usage="usage: bash benchmarks/device_suite.sh [--out DIR] [--only STEP[,STEP...]]; steps: ${STEPS// /, }"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --out=* | --only=*)
            set -- "${1%%=*}" "${1#*=}" "${@:2}" # --opt=value as --opt value
            ;;
        --out | --only)
            if [ "$#" -lt 2 ] || [ -z "$2" ]; then
                echo "error: $1 needs a value; $usage" >&2
                exit 2
            fi
            if [ "$1" = --out ]; then out="$2"; else only="$2"; fi
            shift 2
            ;;
        -h | --help)
            echo "$usage"
            exit 0
            ;;
        *)
            echo "error: unknown argument '$1'; $usage" >&2
            exit 2
            ;;
    esac
done
for step in ${only//,/ }; do
    case " $STEPS " in
        *" $step "*) ;;
        *)
            echo "error: unknown step '$step' in --only; steps: ${STEPS// /, }" >&2
            exit 2
            ;;
    esac
done
if ! mkdir -p "$out"; then
    echo "error: cannot create --out $out; pass a writable directory" >&2
    exit 2
fi
out="$(cd "$out" && pwd)"
cd "$root" || exit 1

sources=""
for package in npu-streams npu-mempool npu-static-kernel npu-graph-export npu-compile; do
    sources="$sources:$root/packages/$package/src"
done
export PYTHONPATH="${sources#:}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

python3 - <<'EOF' 2>&1 | tee "$out/environment.log"
import torch
print("torch", torch.__version__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
EOF

failed=0
run() {
    local name="$1"
    shift
    if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then
        return 0
    fi
    echo "== $name: $*"
    if ! "$@" 2>&1 | tee "$out/$name.log"; then
        echo "== $name FAILED" | tee -a "$out/$name.log"
        failed=1
    fi
}

run device_tests python3 -m pytest -m device -q -p no:cacheprovider packages integration_tests
run decode_step python3 benchmarks/decode_step.py --out "$out"
run replay_overhead python3 benchmarks/replay_overhead.py --out "$out"
run pool_reuse python3 benchmarks/pool_reuse.py --out "$out"
run streams_overlap python3 benchmarks/streams_overlap.py --out "$out"
run static_kernel_warm_start python3 benchmarks/static_kernel_warm_start.py --rounds 1 --out "$out"
run static_kernel_warm_start_compile python3 benchmarks/static_kernel_warm_start.py --via compile --rounds 1 --out "$out"
run static_kernel_warm_start_aot python3 benchmarks/static_kernel_warm_start.py --via aot --rounds 1 --out "$out"
# Needs vLLM on the machine (a CUDA build); the step fails with vLLM's import error otherwise.
run vllm_serving python3 benchmarks/vllm_serving.py --model 1b --device cuda --out "$out"
exit "$failed"
