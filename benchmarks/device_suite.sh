#!/usr/bin/env bash
# Everything that needs an accelerator, in one command of at most 8 minutes on a GPU (or NPU)
# machine, the big questions first, results in at most 8 files:
#
#   bash benchmarks/device_suite.sh --out DIR [--dry-run] [--only STEP[,STEP...]] [--budget SECONDS]
#
# It installs nothing: the packages run from their sources (PYTHONPATH) over the machine's own
# torch (the interpreter is $PYTHON, default python3); pytest, hypothesis, numpy, protobuf and
# transformers must be installed there, and nothing more is needed (CI's dry run has these alone:
# DEVICE_IMAGE in noxfile.py). It writes
# only under DIR, which must be outside the repository (and never writes into the checkout:
# no bytecode, no pytest cache; temporary files go to a private directory removed at the end).
#
# Steps, in order; each has its own time limit, and a step that fails or runs out of time is
# recorded and the next one runs. Estimates are device time on one H100 read from what each step
# does (process starts with `import torch` and CUDA init about 5 s each, Dynamo compiles of the
# demo model about 10 s, Inductor/Triton builds on a cold cache 20-40 s); they add up to about
# 6 minutes, under the 8-minute budget with a margin for a slow start or one step timing out:
#
#   step              estimate  limit  what
#   (code)                1 s      -   before any step: the commit, a hash of the uncommitted
#                                      changes and of the tree, into summary.json (_code.py)
#   environment          10 s    60 s  nvidia-smi (or npu-smi), versions, the allocator and
#                                      launch variables; stops the suite at once, non-zero, when
#                                      torch sees no device
#   smoke                80 s   120 s  device_smoke.py: replay == eager over shapes, KV cache,
#                                      pools, held outputs and steps, decode loop, host-sync
#                                      pieces, dropout masks, a compiled train step, a runner
#                                      under autocast; in five child processes beside them, four
#                                      capture paths, record()/wait() and stream scopes split
#                                      into pieces under the backend, outputs held across a pool
#                                      rewind and forced recaptures, a forced recapture's memory;
#                                      capture time, one-kernel replay against a raw CUDA graph
#   device_tests         90 s   170 s  device_tests.py: the @pytest.mark.device files, one process
#                                      each (2 at once), 90 s per test; fails when a test was
#                                      skipped for want of a device (but on the dry run)
#   decode_step          75 s   150 s  eager, npu-compile, torch cudagraphs and reduce-overhead
#                                      (Inductor), each checked against eager, cudagraph skips
#   replay_overhead      20 s    60 s  eager / raw replay / GraphRunner per call, each row
#                                      host- or device-bound from its device time (events)
#   pool_reuse           10 s    45 s  pool bytes per memory mode
#   streams_overlap      20 s    60 s  one stream against npu_stream_switch in a captured graph
#   static_kernel_warm_start
#                        70 s   180 s  --via static, one round, only with the time left
#
# A step is given its limit, less where the time left must keep the later steps' minimums (but
# never under its own minimum: an earlier step answers a bigger question), and never more than
# the time left, so the suite ends within --budget (default 480 s) whatever hangs; a step that
# cannot get its minimum is recorded as skipped. `--via compile` and `--via aot` of the warm start are not steps: on CUDA
# they would call each batch size once, which is its eager warm-up call, and capture nothing.
# vllm_serving is not a step either (it needs vLLM built for the device).
#
# Files in DIR: suite.log (every step's output), summary.json (the code measured, environment,
# each step's status, time, limit and estimate, digests of the smoke check and the tests, the
# figures the targets are read from), smoke.json, device_tests.xml (JUnit) and benchmarks.json
# (each benchmark's JSON under its step's name).
#
# --dry-run runs the same steps on the CPU with tiny sizes (about 100 s on two idle cores, more
# when they are shared; the static-kernel warm start, six processes and a C++ build, is left out
# there), so that the script cannot rot between device runs: CI runs it
# (integration_tests/test_device_suite.py).
# docs/device-suite.md says what each figure means.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS="environment smoke device_tests decode_step replay_overhead pool_reuse streams_overlap static_kernel_warm_start"
usage="usage: bash benchmarks/device_suite.sh --out DIR [--dry-run] [--only STEP[,STEP...]] [--budget SECONDS]; steps: ${STEPS// /, }"
out=""
only=""
budget=480
dry_run=0
while [ "$#" -gt 0 ]; do
    case "$1" in
        --out=* | --only=* | --budget=*)
            set -- "${1%%=*}" "${1#*=}" "${@:2}" # --opt=value as --opt value
            ;;
        --out | --only | --budget)
            if [ "$#" -lt 2 ] || [ -z "$2" ]; then
                echo "error: $1 needs a value; $usage" >&2
                exit 2
            fi
            case "$1" in
                --out) out="$2" ;;
                --only) only="$2" ;;
                --budget) budget="$2" ;;
            esac
            shift 2
            ;;
        --dry-run)
            dry_run=1
            shift
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
if [ -z "$out" ]; then
    echo "error: --out DIR is required (a directory outside the repository); $usage" >&2
    exit 2
fi
case "$budget" in
    '' | *[!0-9]*)
        echo "error: --budget must be whole seconds, got '$budget'" >&2
        exit 2
        ;;
esac
for step in ${only//,/ }; do
    case " $STEPS " in
        *" $step "*) ;;
        *)
            echo "error: unknown step '$step' in --only; steps: ${STEPS// /, }" >&2
            exit 2
            ;;
    esac
done
if ! command -v timeout >/dev/null 2>&1; then
    echo "error: 'timeout' (GNU coreutils) is not installed; every step runs under it" >&2
    exit 2
fi
# Checked before anything is created: the suite never writes into the checkout.
case "$(realpath -m -- "$out")/" in
    "$(realpath -- "$root")/"*)
        echo "error: --out $out is inside the repository; pass a directory outside it" >&2
        exit 2
        ;;
esac
if ! mkdir -p "$out" || ! [ -w "$out" ]; then
    echo "error: cannot write to --out $out; pass a writable directory" >&2
    exit 2
fi
out="$(cd "$out" && pwd -P)"
# This suite's own files from an earlier run would mix with this one's; nothing else is touched.
rm -f "$out/suite.log" "$out/summary.json" "$out/smoke.json" "$out/device_tests.xml" \
    "$out/benchmarks.json"

stage="$(mktemp -d "${TMPDIR:-/tmp}/device-suite.XXXXXX")" || {
    echo "error: cannot create a temporary directory" >&2
    exit 2
}
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tmp" "$stage/bench"

sources=""
for package in npu-streams npu-mempool npu-static-kernel npu-graph-export npu-compile; do
    sources="$sources:$root/packages/$package/src"
done
export PYTHONPATH="${sources#:}:$root/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1 # nothing written into the checkout
python="${PYTHON:-python3}"
# Temporary files (Inductor's cache, the benchmarks' build directories) in the private directory.
export TMPDIR="$stage/tmp"
if [ "$dry_run" = 1 ]; then
    # The CPU, even on a machine with a device: the dry run checks the suite, not the device.
    export CUDA_VISIBLE_DEVICES="" ASCEND_RT_VISIBLE_DEVICES=""
fi
cd "$root" || exit 2

log="$out/suite.log"
summary="$out/summary.json"
suite_start=$SECONDS
deadline=$((SECONDS + budget))
failed=0

# name | estimate | limit | minimum (what a step needs at least to say anything)
declare -A ESTIMATE=([environment]=10 [smoke]=80 [device_tests]=90 [decode_step]=75
    [replay_overhead]=20 [pool_reuse]=10 [streams_overlap]=20 [static_kernel_warm_start]=200)
declare -A LIMIT=([environment]=60 [smoke]=120 [device_tests]=170 [decode_step]=150
    [replay_overhead]=60 [pool_reuse]=45 [streams_overlap]=60 [static_kernel_warm_start]=270)
declare -A MINIMUM=([environment]=20 [smoke]=60 [device_tests]=60 [decode_step]=60
    [replay_overhead]=20 [pool_reuse]=15 [streams_overlap]=20 [static_kernel_warm_start]=60)
# Steps that keep time for themselves from the ones before; the warm start takes what is left.
RESERVED="smoke device_tests decode_step replay_overhead pool_reuse streams_overlap"

selected() { # the environment always runs: it is what stops the suite without a device
    [ -z "$only" ] || [ "$1" = environment ] || [[ ",$only," == *",$1,"* ]]
}

record() { # name status rc seconds limit note (rc empty: the step did not run)
    "$python" benchmarks/_suite.py step --summary "$summary" --out "$out" --name "$1" \
        --status "$2" --rc "$3" --seconds "$4" --timeout "$5" --estimate "${ESTIMATE[$1]}" \
        --note "$6" --log "$stage/$1.log" || echo "warning: could not record step $1" | tee -a "$log"
}

# Seconds the selected steps after $1 keep for themselves.
reserve_after() {
    local step later=0 total=0
    for step in $RESERVED; do
        if [ "$later" = 1 ] && selected "$step"; then
            total=$((total + MINIMUM[$step]))
        fi
        [ "$step" = "$1" ] && later=1
    done
    echo "$total"
}

# The seconds step $1 gets now: its limit, or less where the budget must keep the later steps'
# minimums, but its own minimum first (the earlier step answers the bigger question), and never
# past the budget. The environment always gets its limit: it decides whether anything runs.
limit_for() {
    local left=$((deadline - SECONDS))
    [ "$1" = environment ] && left="${LIMIT[$1]}"
    local allowed=$((left - $(reserve_after "$1")))
    [ "$allowed" -lt "${MINIMUM[$1]}" ] && allowed="${MINIMUM[$1]}"
    [ "$allowed" -gt "${LIMIT[$1]}" ] && allowed="${LIMIT[$1]}"
    [ "$allowed" -gt "$left" ] && allowed="$left"
    echo "$allowed"
}

# run_step NAME COMMAND...: the command under its time limit, its output in the log.
run_step() {
    local name="$1"
    shift
    if ! selected "$name"; then
        echo "== $name: skipped, not selected (--only $only)" | tee -a "$log"
        record "$name" skipped "" 0 0 "not selected (--only $only)"
        return 0
    fi
    local allowed
    allowed="$(limit_for "$name")"
    if [ "$allowed" -lt "${MINIMUM[$name]}" ]; then
        local why="not enough time left: $((deadline - SECONDS)) s of --budget ${budget} s"
        echo "== $name: skipped, $why" | tee -a "$log"
        record "$name" skipped "" 0 "$allowed" "$why"
        return 0
    fi
    echo "== $name (limit ${allowed} s, estimate ${ESTIMATE[$name]} s): $*" | tee -a "$log"
    local start=$SECONDS
    # Its own process group under `timeout`: everything the step started ends with it.
    timeout --kill-after=10 "$allowed" "$@" 2>&1 | tee -a "$log" >"$stage/$name.log"
    local rc="${PIPESTATUS[0]}"
    local seconds=$((SECONDS - start))
    local status=ok note=""
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        status="timed out"
        note="ended after its limit of ${allowed} s"
        failed=1
    elif [ "$rc" != 0 ]; then
        status=failed
        note="exit code $rc"
        failed=1
    fi
    echo "== $name: $status ($seconds s) $note" | tee -a "$log"
    record "$name" "$status" "$rc" "$seconds" "$allowed" "$note"
    return "$rc"
}

# fold NAME FILE: a selected benchmark's JSON into benchmarks.json, whatever its outcome.
fold() {
    selected "$1" || return 0
    "$python" benchmarks/_suite.py fold --into "$out/benchmarks.json" --name "$1" --source "$2" ||
        echo "warning: could not fold $2 into benchmarks.json" | tee -a "$log"
}

dry=()
[ "$dry_run" = 1 ] && dry=(--dry-run)
echo "device suite: $(date -u '+%Y-%m-%d %H:%M UTC'), dry run: $dry_run, budget ${budget} s," \
    "writing to $out" | tee "$log"
# The code measured, read from the checkout before anything runs: the commit and a hash of the
# uncommitted changes, and a hash of the files that still names the code in a copy without .git.
"$python" benchmarks/_suite.py code --summary "$summary" --root "$root" 2>&1 | tee -a "$log"
run_step environment "$python" benchmarks/_suite.py environment --summary "$summary" ${dry[@]+"${dry[@]}"}
rc=$?
if [ "$rc" != 0 ] && [ "$dry_run" = 0 ]; then
    "$python" benchmarks/_suite.py finish --summary "$summary" --out "$out" \
        --seconds $((SECONDS - suite_start)) >>"$log" 2>&1
    if [ "$rc" = 3 ]; then
        echo "error: no accelerator visible to torch; nothing run (pass --dry-run to check the suite on CPU)" >&2
    else
        echo "error: the environment step failed (exit code $rc); see $log" >&2
    fi
    exit "$rc"
fi

# Tiny sizes on the CPU for the dry run; short defaults on the device.
if [ "$dry_run" = 1 ]; then
    smoke_args=(--tiny --child-timeout 100)
    test_timeout=60
    decode_args=(--steps 3)
    replay_args=(--kernels 20 --calls 100 --repeats 2)
    pool_args=(--width 64 --rows 64,48,32,16)
    streams_args=(--depth 4 --width 64 --replays 10 --repeats 2)
else
    # The children run beside the in-process checks; the timings come after them.
    smoke_args=(--child-timeout 90)
    test_timeout=90
    decode_args=(--steps 20)
    replay_args=(--kernels 200 --calls 1000 --repeats 5)
    pool_args=()
    streams_args=(--replays 100 --repeats 5)
fi

run_step smoke "$python" benchmarks/device_smoke.py --out "$out" "${smoke_args[@]}"
# The tests get their own budget inside the step's limit, so that they always write their XML.
# Off the dry run, a device test skipped because pytest saw no device fails the step: it passed
# for nothing.
run_step device_tests "$python" benchmarks/device_tests.py --out "$out" \
    --test-timeout "$test_timeout" --budget "$(($(limit_for device_tests) - 15))" --jobs 2 \
    ${dry[@]+"${dry[@]}"}
run_step decode_step "$python" benchmarks/decode_step.py --out "$stage/bench" "${decode_args[@]}"
# Named after the device it ran on: decode_step_cuda.json, decode_step_cpu.json, ...
decode_json="$(find "$stage/bench" -name 'decode_step_*.json' | head -n 1)"
fold decode_step "${decode_json:-$stage/bench/decode_step.json}"
run_step replay_overhead "$python" benchmarks/replay_overhead.py --out "$stage/bench" \
    "${replay_args[@]}"
fold replay_overhead "$stage/bench/replay_overhead.json"
run_step pool_reuse "$python" benchmarks/pool_reuse.py --out "$stage/bench" ${pool_args[@]+"${pool_args[@]}"}
fold pool_reuse "$stage/bench/pool_reuse.json"
run_step streams_overlap "$python" benchmarks/streams_overlap.py --out "$stage/bench" \
    "${streams_args[@]}"
fold streams_overlap "$stage/bench/streams_overlap.json"
if [ "$dry_run" = 1 ]; then
    # Six processes and a C++ build: about two minutes on CPU, longer than the rest of the dry
    # run together; `nox -s compat` runs the script on CPU.
    why="dry run: left out (nox -s compat runs it on CPU)"
    echo "== static_kernel_warm_start: skipped, $why" | tee -a "$log"
    record static_kernel_warm_start skipped "" 0 0 "$why"
else
    run_step static_kernel_warm_start "$python" benchmarks/static_kernel_warm_start.py \
        --via static --rounds 1 --steps 20 --repeats 3 --out "$stage/bench"
    fold static_kernel_warm_start "$stage/bench/static_kernel_warm_start.json"
fi

"$python" benchmarks/_suite.py finish --summary "$summary" --out "$out" \
    --seconds $((SECONDS - suite_start)) 2>&1 | tee -a "$log"
exit "$failed"
