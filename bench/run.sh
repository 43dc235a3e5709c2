#!/bin/sh
# bench/run.sh: what `make bench` runs, from the build directory.
#
# First bench/bench_peak: one core's FMA peak (float32, float64) and the
# memory bandwidth (STREAM copy, triad), the yardsticks. Then for each
# configuration (size x dtype x threads), interleaved so that load on the
# machine falls on all of them alike, in rounds (each run below once a
# round, each round a share of the time budget; a configuration's figure is
# the median of its rounds' medians: the load on a shared host comes and
# goes in phases of a second or two that slow a small step up to 2x, and a
# single run of each drew a phase of its own):
#   1. bench/bench_head           the HEADLINE: the composed head step,
#                                 public ops as PyTorch's peer composes them
#                                 (x@W_q, x@W_k, x@W_v, q@k^T, scale,
#                                 masked_fill(-inf), softmax, @v, MSE;
#                                 backward; AdamW; zero grads)
#   2. bench/bench_head --path fused-softmax, --path tiled
#                                 the same head through the fused softmax
#                                 and through the fused, tiled attention op
#                                 (tg_attention), extra rows, when `bench_head
#                                 --path tiled --config tiny` works
#   3. bench/peer_torch.py        PyTorch as installed
#   4. bench/peer_torch.py        PyTorch with glibc's allocator tuned (no
#                                 trimming, big mmap threshold, huge pages)
# each in its own process (so peak RSS is that configuration's). Then one
# table, speedups (PyTorch's time over ours) against the faster PyTorch;
# the composed step again with OPENBLAS_CORETYPE=Prescott for both sides;
# each op's share of the composed step (float32, 1 thread), from the tape's
# timing mode (bench_head --profile, a run of its own, never the timed
# one); the GPT's training throughput (bench/bench_gpt against
# bench/peer_torch_gpt.py, tokens/s, peak RSS: tiny_gpt's default and the
# small GPT-2-layout model, L4 H4 C256 V8000 at B8 T128; GPT-2 124M at B4
# T64 with BENCH_GPT_MODELS); loading GPT-2 124M's checkpoint
# (bench/bench_load against bench/peer_torch_load.py: the load's time, CPU
# time and peak RSS over the model's bytes; ours from a .safetensors and
# from llm.c's .bin, PyTorch's from the .safetensors memory-mapped and read
# into its parameters; each load a process of its own, in rounds; on a
# 2-core machine writing the two ~500 MB files takes about 15 s and a round
# of loads about 10 s, under a minute in all; --quick's 2-layer files about
# half a minute in all, most of it Python importing torch once a load); the
# small model's per-op profile; the custom op overhead (one step of
# y = 2x, sum, backward through the built-in op and through a custom op
# wrapping it: bench/bench_custom's tg_custom against
# bench/peer_torch_custom.py's torch.autograd.Function, at a few sizes,
# float32, 1 thread, ns per step); second order (bench/bench_second_order
# against bench/peer_torch_second_order.py: one Hessian-vector product and
# one Jacobian-vector product of the head's loss as a function of W_q, at
# medium on 1 thread, over one forward + backward in the same process,
# calls of each alternating); bench/bench_matmul's table; and the issue's
# targets beside what was measured (the 1024^3 products as a % of the FMA
# peak bench_matmul measures in turn with them).
#
#   run.sh [--quick]      --quick (or BENCH_QUICK=1): tiny, small, medium in
#                         float32 on 1 thread, the matmul table at medium,
#                         second order in float64 alone, and the checkpoint
#                         load at 2 layers, not GPT-2 124M's 12 (its table
#                         and targets say so)
# Environment: BENCH_PYTHON (default /usr/bin/python3, Debian's python3-torch),
# BENCH_SECONDS (timed budget per configuration and program, default 1.5,
# split among the rounds), BENCH_ROUNDS (default 3), BENCH_SIZES,
# BENCH_DTYPES, BENCH_THREADS (lists overriding the defaults below),
# BENCH_CUSTOM_SIZES (the custom op's element counts, comma-separated,
# default 16,4096,262144: its fixed cost shows at the first, vanishes at
# the last; --quick runs them too, the whole section costs seconds),
# BENCH_SECOND_ORDER_DTYPES (second order's, comma-separated, default
# f64,f32, --quick f64: float64 is where HVPs are used), BENCH_GPT_MODELS
# (bench_gpt's --model names, default "tiny small"; "tiny small gpt2" adds
# GPT-2 124M at B4 T64, about 4 minutes more on an idle 2-core machine;
# the small model adds about 1.5 minutes, --quick 45 s), BENCH_LOAD_LAYERS
# (the loaded checkpoint's layers, default 12, GPT-2 124M; --quick 2, 214
# MB a file). The checkpoints are written to $TMPDIR, else to the build dir
# (not /tmp, often memory itself), and removed when the section ends; the
# section is skipped, with a line saying why, when that disk lacks their
# bytes and a tenth more, and PyTorch's rows when $BENCH_PYTHON cannot
# import torch and numpy.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are passed through untouched
# (but for the Prescott table, whose runs set OPENBLAS_CORETYPE=Prescott);
# OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are set per configuration.
#
# Programs are found relative to the current directory (the build dir),
# bench/peer_torch.py relative to this script.
set -u

here=$(cd "$(dirname "$0")" && pwd)
head=./bench/bench_head
matmul=./bench/bench_matmul
peak=./bench/bench_peak
gpt=./bench/bench_gpt
custom=./bench/bench_custom
second_order=./bench/bench_second_order
load_prog=./bench/bench_load
peer=$here/peer_torch.py
peer_gpt=$here/peer_torch_gpt.py
peer_custom=$here/peer_torch_custom.py
peer_second_order=$here/peer_torch_second_order.py
peer_load=$here/peer_torch_load.py
python=${BENCH_PYTHON:-/usr/bin/python3}
seconds=${BENCH_SECONDS:-1.5}
rounds=${BENCH_ROUNDS:-3}
quick=${BENCH_QUICK:-0}
tuned='glibc.malloc.trim_threshold=68719476736:glibc.malloc.mmap_threshold=33554432:glibc.malloc.hugetlb=1'

for arg in "$@"; do
    case $arg in
    --quick) quick=1 ;;
    -h | --help)
        sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "run.sh: unknown argument '$arg' (--help)" >&2
        exit 2
        ;;
    esac
done

for prog in "$head" "$matmul" "$peak" "$gpt" "$custom" "$second_order" \
    "$load_prog"; do
    if [ ! -x "$prog" ]; then
        echo "run.sh: no $prog here: run it from the build dir (make bench)" >&2
        exit 2
    fi
done

if [ "$quick" = 1 ]; then
    sizes=${BENCH_SIZES:-tiny small medium}
    dtypes=${BENCH_DTYPES:-f32}
    threads_list=${BENCH_THREADS:-1}
    matmul_sizes=medium
    peak_args="--seconds 0.2 --mb 64"
    so_dtypes=${BENCH_SECOND_ORDER_DTYPES:-f64}
    gpt_models=${BENCH_GPT_MODELS:-tiny small}
    load_layers=${BENCH_LOAD_LAYERS:-2}
else
    sizes=${BENCH_SIZES:-tiny small medium large xl}
    dtypes=${BENCH_DTYPES:-f32 f64}
    threads_list=${BENCH_THREADS:-1 2}
    matmul_sizes=tiny,small,medium,large,xl
    peak_args="--seconds 0.5 --mb 128"
    so_dtypes=${BENCH_SECOND_ORDER_DTYPES:-f64,f32}
    gpt_models=${BENCH_GPT_MODELS:-tiny small}
    load_layers=${BENCH_LOAD_LAYERS:-12}
fi

case $rounds in
'' | *[!0-9]*) rounds=0 ;;
esac
case $load_layers in
'' | *[!0-9]*) load_layers=0 ;;
esac
if [ "$load_layers" -lt 1 ]; then
    echo "run.sh: BENCH_LOAD_LAYERS must be a whole number >= 1, not '${BENCH_LOAD_LAYERS-}'" >&2
    exit 2
fi
if [ "$rounds" -lt 1 ]; then
    echo "run.sh: BENCH_ROUNDS must be a whole number >= 1, not '${BENCH_ROUNDS-}'" >&2
    exit 2
fi
# each round's share of BENCH_SECONDS (a positive decimal number)
if ! round_seconds=$(awk -v s="$seconds" -v r="$rounds" 'BEGIN {
    if (s !~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ || s + 0 <= 0) exit 1
    print s / r }'); then
    echo "run.sh: BENCH_SECONDS must be a positive number, not '$seconds'" >&2
    exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-bench.XXXXXX") || exit 1
# ckpt: the load section's checkpoints' directory while it exists
ckpt=
trap 'rm -rf "$tmp" ${ckpt:+"$ckpt"}' EXIT
trap 'exit 130' INT TERM
results=$tmp/results
# measure() appends to $out: the head table's lines go to $results, the
# Prescott ones to $prescott, tiny_gpt's to $gpt_results, the custom op's
# (measure_sizes) to $custom_results, second order's (measure_ways) to
# $so_results, the checkpoint loads' to $load_results
prescott=$tmp/prescott
gpt_results=$tmp/gpt
custom_results=$tmp/custom
so_results=$tmp/second_order
so_checks=$tmp/second_order_checks
load_results=$tmp/load
custom_sizes=${BENCH_CUSTOM_SIZES:-16,4096,262144}
out=$results

# ---- what is there to compare ---------------------------------------------

have_torch=0
if "$python" -c 'import torch' >/dev/null 2>"$tmp/err"; then
    have_torch=1
fi
have_fused=0
if "$head" --path tiled --config tiny --seconds 0.01 >/dev/null 2>"$tmp/fused_err"; then
    have_fused=1
fi
fused_paths=
[ "$have_fused" = 1 ] && fused_paths="fused-softmax tiled"

echo "tapegrad make bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -sm)"
cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
echo "cpu: ${cpu:-unknown}, $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') online;" \
    "load average at start: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}" \
    "OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-(unset)}"
"$head" --info
if [ "$have_torch" = 1 ]; then
    "$python" "$peer" --info
else
    echo "PyTorch: skipped, $python cannot import torch:" \
        "$(tail -n 1 "$tmp/err")"
fi
if [ "$have_fused" = 0 ]; then
    echo "fused: skipped, \`bench_head --path tiled --config tiny\` fails:" \
        "$(tail -n 1 "$tmp/fused_err")"
fi
echo "per run: warm-up >= 2 steps and 0.25 s, then ~${round_seconds} s of steps" \
    "(>= 3) timed one by one; ${rounds} rounds of runs, interleaved; ms are" \
    "the median of the rounds' medians"
echo

# ---- the machine's peak ----------------------------------------------------

# one core: the FMA loop is single-threaded; STREAM on 1 thread too
# shellcheck disable=SC2086 # peak_args is a list of words
if OMP_NUM_THREADS=1 "$peak" $peak_args >"$tmp/peak" 2>"$tmp/err"; then
    awk '{
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        printf "machine peak, one core (bench_peak, %s kernel): FMA %s GFLOP/s float32, %s float64;\n", v["isa"], v["fma_f32_gflops"], v["fma_f64_gflops"]
        printf "memory bandwidth (STREAM, 3 x %s MiB, 1 thread): copy %s GB/s, triad %s GB/s\n", v["buffer_mb"], v["copy_gbs"], v["triad_gbs"]
    }' "$tmp/peak"
else
    echo "run.sh: bench_peak failed:" >&2
    sed 's/^/  /' "$tmp/err" >&2
    : >"$tmp/peak"
fi
echo

# ---- the runs ----------------------------------------------------------------

# measure KEY IMPL THREADS COMMAND...: runs COMMAND with the thread count in
# the environment and appends its result line to $results, tagged
# key=KEY impl=IMPL (or a failed=1 line, with its stderr shown).
measure() {
    key=$1 impl=$2 nthreads=$3
    shift 3
    if line=$(OPENBLAS_NUM_THREADS=$nthreads OMP_NUM_THREADS=$nthreads \
        "$@" 2>"$tmp/err"); then
        printf '%s key=%s tag=%s\n' "$line" "$key" "$impl" >>"$out"
    else
        printf 'bench key=%s tag=%s failed=1\n' "$key" "$impl" >>"$out"
        echo "run.sh: $impl $key failed:" >&2
        sed 's/^/  /' "$tmp/err" >&2
    fi
}

# The medians of KEY's IMPL runs, round by round (a/b/c), for the progress
# line.
median_of() {
    awk -v key="$1" -v impl="$2" '
        index($0, " key=" key " tag=" impl) {
            for (i = 1; i <= NF; i++)
                if ($i ~ /^median_ms=/) {
                    sub(/^median_ms=/, "", $i)
                    m = m == "" ? $i : m "/" $i
                }
        }
        END { print (m == "" ? "-" : m) }' "$out"
}

n_configs=0
for s in $sizes; do for d in $dtypes; do for t in $threads_list; do
    n_configs=$((n_configs + 1))
done; done; done

i=0
: >"$results"
for s in $sizes; do
    for d in $dtypes; do
        for t in $threads_list; do
            i=$((i + 1))
            key="$s/$d/${t}t"
            set -- --config "$s" --dtype "$d" --threads "$t" \
                --seconds "$round_seconds"
            r=0
            while [ "$r" -lt "$rounds" ]; do
                r=$((r + 1))
                measure "$key" ours "$t" "$head" "$@"
                for path in $fused_paths; do
                    measure "$key" "$path" "$t" "$head" --path "$path" "$@"
                done
                if [ "$have_torch" = 1 ]; then
                    measure "$key" torch "$t" "$python" "$peer" "$@"
                    measure "$key" tuned "$t" env "GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}$tuned" \
                        "$python" "$peer" --impl torch-tuned "$@"
                fi
            done
            fused_ms=
            if [ "$have_fused" = 1 ]; then
                fused_ms=" (tiled $(median_of "$key" tiled))"
            fi
            echo "[$i/$n_configs] $key: composed $(median_of "$key" ours)$fused_ms ms," \
                "torch $(median_of "$key" torch) ms," \
                "tuned $(median_of "$key" tuned) ms" >&2
        done
    done
done

# ---- the same with OPENBLAS_CORETYPE=Prescott, both sides -------------------

# Some machines set OPENBLAS_CORETYPE=Prescott (SSE3 kernels): OpenBLAS then
# runs its slow GEMM in both processes. The composed step, float32, 1 thread.
out=$prescott
: >"$prescott"
if [ "$have_torch" = 1 ]; then
    for s in $sizes; do
        key="$s/f32/1t"
        set -- --config "$s" --dtype f32 --threads 1 --seconds "$round_seconds"
        r=0
        while [ "$r" -lt "$rounds" ]; do
            r=$((r + 1))
            measure "$key" ours 1 env OPENBLAS_CORETYPE=Prescott "$head" "$@"
            measure "$key" torch 1 env OPENBLAS_CORETYPE=Prescott \
                "$python" "$peer" "$@"
        done
        echo "[Prescott] $key done" >&2
    done
fi

# ---- the GPT's throughput --------------------------------------------------

# Each model of $gpt_models (bench_gpt --model: tiny is tiny_gpt's default,
# small the issue's L4 H4 C256 V8000 at B8 T128 in GPT-2's layout, gpt2
# GPT-2 124M at B4 T64) at each thread count, ours and PyTorch's
# alternating, round by round.
out=$gpt_results
: >"$gpt_results"
for m in $gpt_models; do
    for t in $threads_list; do
        key="$m/${t}t"
        r=0
        while [ "$r" -lt "$rounds" ]; do
            r=$((r + 1))
            measure "$key" ours "$t" "$gpt" --model "$m" --threads "$t" \
                --seconds "$round_seconds"
            if [ "$have_torch" = 1 ]; then
                measure "$key" torch "$t" "$python" "$peer_gpt" --model "$m" \
                    --threads "$t" --seconds "$round_seconds"
            fi
        done
        echo "[gpt] $key: ours $(median_of "$key" ours) ms," \
            "torch $(median_of "$key" torch) ms" >&2
    done
done

# ---- loading GPT-2's checkpoint --------------------------------------------

# GPT-2's shape with $load_layers layers (12: GPT-2 124M) written once by
# bench_load make, from seed 0, as a .safetensors of GPT-2's names with the
# head tied to the token table (the layout the peer's GPT2Model takes: it
# has no lm_head) and as llm.c's .bin; then loaded round by round, each load
# a process of its own so that its peak RSS is the load's: ours from either
# file, PyTorch's from the .safetensors its two ways (memory-mapped then
# load_state_dict; readinto each parameter). The files are just written,
# so every load reads them from the page cache (synced first, so that no
# write-back runs under a timed load). Their bytes: 4 per parameter,
# (50304 + 1024) x 768 for the (padded) token and position tables, 12 x 768^2
# + 13 x 768 a layer, 2 x 768 for the final norm, twice (two files), and a
# tenth more.
out=$load_results
: >"$load_results"
load_skip=
load_torch_skip=
load_torch_base_kb=
have_torch_load=0
if [ "$have_torch" = 1 ]; then
    if "$python" -c 'import numpy' >/dev/null 2>"$tmp/err"; then
        have_torch_load=1
    else
        load_torch_skip="$python cannot import numpy: $(tail -n 1 "$tmp/err")"
    fi
else
    load_torch_skip="$python cannot import torch"
fi
if [ "$load_layers" = 12 ]; then load_key=124M; else load_key="L$load_layers"; fi
load_parent=${TMPDIR:-$(pwd)}
load_need_kb=$(awk -v l="$load_layers" 'BEGIN {
    printf "%d", 1.1 * 2 * 4 * ((50304 + 1024) * 768 + l * (12 * 768 * 768 + 13 * 768) + 2 * 768) / 1024 }')
load_free_kb=$(df -Pk "$load_parent" 2>/dev/null | awk 'NR == 2 { print $4 }')
case $load_free_kb in
'' | *[!0-9]*) load_free_kb=0 ;;
esac
if [ "$load_free_kb" -lt "$load_need_kb" ]; then
    load_skip="$((load_need_kb / 1024)) MB needed in $load_parent, $((load_free_kb / 1024)) MB free"
elif ! ckpt=$(mktemp -d "$load_parent/tg-bench-load.XXXXXX"); then
    ckpt=
    load_skip="cannot make a directory in $load_parent"
elif ! "$load_prog" make "$ckpt/gpt2.safetensors" --layers "$load_layers" \
    2>"$tmp/err" || ! "$load_prog" make "$ckpt/gpt2.bin" --layers "$load_layers" \
    --llmc 2>"$tmp/err"; then
    load_skip="bench_load make failed: $(tail -n 1 "$tmp/err")"
fi
if [ -n "$load_skip" ]; then
    echo "[load] skipped: $load_skip" >&2
    rm -rf ${ckpt:+"$ckpt"}
    ckpt=
else
    # GNU sync takes files; POSIX's syncs everything
    sync "$ckpt/gpt2.safetensors" "$ckpt/gpt2.bin" 2>/dev/null || sync
    r=0
    while [ "$r" -lt "$rounds" ]; do
        r=$((r + 1))
        measure "$load_key" ours 1 "$load_prog" load "$ckpt/gpt2.safetensors"
        measure "$load_key" ours_llmc 1 "$load_prog" load "$ckpt/gpt2.bin" --llmc
        if [ "$have_torch_load" = 1 ]; then
            measure "$load_key" torch_mmap 1 "$python" "$peer_load" \
                "$ckpt/gpt2.safetensors" mmap
            measure "$load_key" torch_readinto 1 "$python" "$peer_load" \
                "$ckpt/gpt2.safetensors" readinto
        fi
    done
    rm -rf "$ckpt"
    ckpt=
    # what torch's interpreter holds before any load, for the footnote
    if [ "$have_torch_load" = 1 ]; then
        load_torch_base_kb=$("$python" -c 'import resource, numpy, torch
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)' 2>/dev/null)
    fi
    # the progress line: each variant's load_s, round by round
    awk -v key="$load_key" '
    {
        t = ""; v = ""
        for (i = 1; i <= NF; i++) {
            if (index($i, "tag=") == 1) t = substr($i, 5)
            if (index($i, "load_s=") == 1) v = substr($i, 8)
        }
        if (!(t in s)) order[++n] = t
        s[t] = s[t] (s[t] == "" ? "" : "/") (v == "" ? "failed" : v)
    }
    END {
        for (i = 1; i <= n; i++) printf "%s%s %s s", (i > 1 ? ", " : "[load] " key ": "), order[i], s[order[i]]
        print ""
    }' "$load_results" >&2
fi

# ---- the custom op's overhead ----------------------------------------------

# measure_lines FIELD WHAT IMPL COMMAND...: as measure, for a program that
# prints one line per key and way, on 1 thread: each line whose FIELD= comes
# just before its path= is tagged key=FIELD's value tag=IMPL-WAY (its
# path=); WHAT names the section in a failure's message.
measure_lines() {
    field=$1 what=$2 impl=$3
    shift 3
    if OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$@" >"$tmp/lines" \
        2>"$tmp/err"; then
        sed -n "s/.* $field=\([a-z0-9]*\) path=\([a-z]*\) .*/& key=\1 tag=$impl-\2/p" \
            "$tmp/lines" >>"$out"
    else
        printf 'bench key=- tag=%s failed=1\n' "$impl" >>"$out"
        echo "run.sh: $impl $what failed:" >&2
        sed 's/^/  /' "$tmp/err" >&2
    fi
}

# measure_sizes IMPL COMMAND...: bench_custom, peer_torch_custom.py, a line
# per size (n=) and way.
measure_sizes() { measure_lines n "custom op overhead" "$@"; }

# Each program alternates its two ways sample by sample (the ratio within
# a program is the steady figure); the programs alternate round by round.
out=$custom_results
: >"$custom_results"
r=0
while [ "$r" -lt "$rounds" ]; do
    r=$((r + 1))
    measure_sizes tapegrad "$custom" --sizes "$custom_sizes" \
        --seconds "$round_seconds"
    if [ "$have_torch" = 1 ]; then
        measure_sizes torch "$python" "$peer_custom" --sizes "$custom_sizes" \
            --seconds "$round_seconds"
    fi
done
echo "[custom op] done" >&2

# ---- second order: HVP and JVP against forward+backward ---------------------

# measure_ways IMPL COMMAND...: bench_second_order, its peer: a line per
# dtype and way, and a `check` line per dtype (the results of the ways
# against each other), the last round's kept for the table's footnote. A
# way that fails (an op without a recorded backward or a forward-mode rule;
# torch 1.13's forward over reverse) prints failed=1 and its reason, on
# stderr, once.
measure_ways() {
    measure_lines dtype "second order" "$@"
    grep '^check ' "$tmp/lines" >"$tmp/checks.$1"
    if [ -s "$tmp/err" ] && [ ! -e "$tmp/so_err.$1" ]; then
        echo "run.sh: $1 second order, what failed:" >&2
        sed 's/^/  /' "$tmp/err" >&2
        : >"$tmp/so_err.$1"
    fi
}

# Each program alternates its ways call by call (its ratios are the steady
# figure); the programs alternate round by round.
out=$so_results
: >"$so_results"
r=0
while [ "$r" -lt "$rounds" ]; do
    r=$((r + 1))
    measure_ways tapegrad "$second_order" --dtypes "$so_dtypes" \
        --seconds "$round_seconds"
    if [ "$have_torch" = 1 ]; then
        measure_ways torch "$python" "$peer_second_order" --dtypes "$so_dtypes" \
            --seconds "$round_seconds"
    fi
done
cat "$tmp/checks.tapegrad" "$tmp/checks.torch" >"$so_checks" 2>/dev/null
echo "[second order] done" >&2

# ---- the per-op breakdown (a run of its own: profiling is never timed) -------

# profile_run NAME COMMAND...: COMMAND's profile lines into $tmp/profile.NAME
profile_run() {
    name=$1
    shift
    if ! OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$@" >"$tmp/profile.$name" \
        2>"$tmp/err"; then
        echo "run.sh: the profile of $name failed:" >&2
        sed 's/^/  /' "$tmp/err" >&2
        : >"$tmp/profile.$name"
    fi
}
profiled=
for s in $sizes; do
    profile_run "$s" "$head" --config "$s" --dtype f32 --threads 1 \
        --seconds 0.5 --profile
    profiled="$profiled $s"
done
profile_run tiny_gpt "$gpt" --threads 1 --seconds 0.5 --profile
profiled="$profiled tiny_gpt"
case " $gpt_models " in
*" small "*)
    profile_run small_gpt "$gpt" --model small --threads 1 --seconds 0.5 \
        --min-reps 1 --profile
    profiled="$profiled small_gpt"
    ;;
esac

# ---- the table ---------------------------------------------------------------

# Both awk programs read the result lines; field(name) is one key=value.
# shellcheck disable=SC2016 # awk code, expanded by awk
awk_field='
function field(name,   i) {
    for (i = 1; i <= NF; i++)
        if (index($i, name "=") == 1)
            return substr($i, length(name) + 2)
    return ""
}
# The faster of the two PyTorch runs of key by the measure m ("median_ms"
# or "cpu_ms" values in the array v), "" when neither ran.
function best(v, key,   t, u) {
    t = v[key, "torch"]; u = v[key, "tuned"]
    if (t == "") return u
    return u != "" && u + 0 < t + 0 ? u : t
}
function ms(v) {
    if (v == "") return "-"
    return v < 1 ? sprintf("%.4f", v) : v < 10 ? sprintf("%.3f", v) : \
           v < 100 ? sprintf("%.2f", v) : sprintf("%.1f", v)
}
function mb(kb) { return kb == "" ? "-" : sprintf("%.1f", kb / 1024) }
# PyTorch time over ours, "-" when either is missing.
function speedup(theirs, ours) {
    return theirs == "" || ours == "" || ours + 0 <= 0 ? "-" : \
        sprintf("%.2fx", theirs / ours)
}'

# The rounds to one line per configuration and program: the round whose
# median is the median of the rounds' medians (the lower middle for an even
# count), with the min and max over every round, the median of the rounds'
# CPU times (by the same rule, on its own), the largest peak RSS, and
# rounds=N round_medians=a/b/c; a failed round fails the configuration. In
# place, before the tables read the file.
consolidate() {
    awk "$awk_field"'
    {
        g = field("key") SUBSEP field("tag")
        if (!(g in count)) order[++n] = g
        c = ++count[g]; line[g, c] = $0
        if (field("failed") != "") { failed[g] = $0; next }
        med[g, c] = field("median_ms") + 0
        cpu[g, c] = field("cpu_ms")
        v = field("min_ms"); if (v != "" && (!(g in lo) || v + 0 < lo[g] + 0)) lo[g] = v
        v = field("max_ms"); if (v != "" && (!(g in hi) || v + 0 > hi[g] + 0)) hi[g] = v
        v = field("peak_rss_kb"); if (v != "" && (!(g in rss) || v + 0 > rss[g] + 0)) rss[g] = v
    }
    # the lower middle of the c values v[g, 1..c], sorted in idx[]
    function middle(v, g, c,   i, j, t) {
        for (i = 1; i <= c; i++) idx[i] = i
        for (i = 2; i <= c; i++)
            for (j = i; j > 1 && v[g, idx[j]] + 0 < v[g, idx[j - 1]] + 0; j--) {
                t = idx[j]; idx[j] = idx[j - 1]; idx[j - 1] = t
            }
        return idx[int((c + 1) / 2)]
    }
    END {
        for (r = 1; r <= n; r++) {
            g = order[r]
            if (g in failed) { print failed[g]; continue }
            c = count[g]
            mid_cpu = cpu[g, middle(cpu, g, c)]
            m = split(line[g, middle(med, g, c)], f, " ")
            out = ""; meds = ""
            for (i = 1; i <= c; i++) meds = meds (i > 1 ? "/" : "") field_of(line[g, i], "median_ms")
            for (i = 1; i <= m; i++) {
                if (index(f[i], "min_ms=") == 1 && (g in lo)) f[i] = "min_ms=" lo[g]
                else if (index(f[i], "max_ms=") == 1 && (g in hi)) f[i] = "max_ms=" hi[g]
                else if (index(f[i], "peak_rss_kb=") == 1 && (g in rss)) f[i] = "peak_rss_kb=" rss[g]
                else if (index(f[i], "cpu_ms=") == 1 && mid_cpu != "") f[i] = "cpu_ms=" mid_cpu
                out = out (i > 1 ? " " : "") f[i]
            }
            print out " rounds=" c " round_medians=" meds
        }
    }
    function field_of(s, name,   k, a, i) {
        k = split(s, a, " ")
        for (i = 1; i <= k; i++)
            if (index(a[i], name "=") == 1) return substr(a[i], length(name) + 2)
        return ""
    }' "$1" >"$1.rounds" && mv "$1.rounds" "$1"
}
consolidate "$results"
consolidate "$prescott"
consolidate "$gpt_results"
consolidate "$custom_results"
consolidate "$so_results"

# The load rounds to one line per variant: the median (the lower middle for
# an even count) of each of load_s, cpu_s, peak_rss_kb and peak_over_model
# over the rounds, each on its own, and rounds=N; a failed round fails the
# variant. In place, as consolidate.
consolidate_load() {
    awk "$awk_field"'
    BEGIN { nm = split("load_s cpu_s peak_rss_kb peak_over_model", m, " ") }
    {
        g = field("key") SUBSEP field("tag")
        if (!(g in count)) order[++n] = g
        c = ++count[g]
        if (field("failed") != "") { failed[g] = $0; next }
        key[g] = field("key"); tag[g] = field("tag"); mib[g] = field("model_mib")
        for (i = 1; i <= nm; i++) v[g, m[i], c] = field(m[i])
    }
    function median(g, name, c,   i, j, t, a) {
        for (i = 1; i <= c; i++) a[i] = v[g, name, i] + 0
        for (i = 2; i <= c; i++)
            for (j = i; j > 1 && a[j] < a[j - 1]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return a[int((c + 1) / 2)]
    }
    END {
        for (r = 1; r <= n; r++) {
            g = order[r]
            if (g in failed) { print failed[g]; continue }
            s = "load key=" key[g] " tag=" tag[g] " model_mib=" mib[g]
            for (i = 1; i <= nm; i++) s = s " " m[i] "=" median(g, m[i], count[g])
            print s " rounds=" count[g]
        }
    }' "$1" >"$1.rounds" && mv "$1.rounds" "$1"
}
consolidate_load "$load_results"

echo "attention head, one training step (forward, MSE, backward, AdamW, zero grads)"
echo "HEADLINE: the composed head step (public ops, as PyTorch composes them);" \
    "fused-softmax and tiled (tg_attention) are extra rows"
awk "$awk_field"'
{
    key = field("key"); tag = field("tag")
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    failed[key, tag] = field("failed") != ""
    med[key, tag] = field("median_ms"); lo[key, tag] = field("min_ms")
    hi[key, tag] = field("max_ms"); gf[key, tag] = field("gflops")
    cpu[key, tag] = field("cpu_ms"); rss[key, tag] = field("peak_rss_kb")
}
END {
    fmt = "%-32s %-28s %8s %9s %10s %10s %9s %8s %8s\n"
    printf fmt, "config", "tapegrad ms median (min-max)", "GFLOP/s", \
        "peak RSS", "torch ms", "tuned ms", "torch RSS", "speedup", "speedup"
    printf fmt, "", "", "", "MB", "", "", "MB", "wall", "cpu time"
    split("ours fused-softmax tiled", tags, " ")
    for (r = 1; r <= n; r++) {
        key = order[r]
        b = best(med, key); bc = best(cpu, key)
        trss = rss[key, "torch"]
        if (med[key, "tuned"] != "" && med[key, "tuned"] + 0 < med[key, "torch"] + 0)
            trss = rss[key, "tuned"]
        for (v = 1; v <= 3; v++) {
            tag = tags[v]
            if (!((key, tag) in med)) continue
            name = v == 1 ? key " composed head step" : "  " key " " tag
            if (failed[key, tag]) { printf fmt, name, "failed", "", "", "", "", "", "", ""; continue }
            spread = ms(med[key, tag]) " (" ms(lo[key, tag]) "-" ms(hi[key, tag]) ")"
            printf fmt, name, spread, gf[key, tag], mb(rss[key, tag]), \
                v == 1 ? ms(med[key, "torch"]) : "", v == 1 ? ms(med[key, "tuned"]) : "", \
                v == 1 ? mb(trss) : "", speedup(b, med[key, tag]), \
                speedup(bc, cpu[key, tag])
        }
    }
}' "$results"
echo "(speedup: the faster PyTorch median over ours, by wall time and by the" \
    "process's CPU time (all threads; the steadier one on a loaded machine," \
    "for 1 thread); > 1 is faster than PyTorch; torch RSS: the faster run's" \
    "peak; GFLOP/s: the six matmuls, forward and backward, at the wall median)"
echo

if [ -s "$prescott" ]; then
    echo "the composed head step with OPENBLAS_CORETYPE=Prescott for both sides" \
        "(float32, 1 thread)"
    awk "$awk_field"'
    {
        key = field("key"); tag = field("tag")
        if (!(key in seen)) { seen[key] = 1; order[++n] = key }
        med[key, tag] = field("median_ms"); cpu[key, tag] = field("cpu_ms")
        blas[key, tag] = field("blas")
    }
    END {
        fmt = "  %-14s %10s %10s %10s %10s %-14s\n"
        printf fmt, "config", "ours ms", "torch ms", "speedup", "cpu", "kernels"
        for (r = 1; r <= n; r++) {
            key = order[r]
            printf fmt, key, ms(med[key, "ours"]), ms(med[key, "torch"]), \
                speedup(med[key, "torch"], med[key, "ours"]), \
                speedup(cpu[key, "torch"], cpu[key, "ours"]), \
                blas[key, "ours"] "/" blas[key, "torch"]
        }
    }' "$prescott"
    echo
fi

echo "GPT training throughput (forward, cross-entropy, backward, AdamW, zero" \
    "grads; float32): tiny_gpt (2 layers, 4 heads, n_embd 64, block 32," \
    "batch 32, vocab 76, exact GELU); small (L4 H4 C256 V8000, B8 T128);" \
    "gpt2 (GPT-2 124M, L12 H12 C768 V50257, B4 T64); small and gpt2 in" \
    "GPT-2's layout (tanh GELU, every bias, tied head)"
awk "$awk_field"'
{
    key = field("key"); tag = field("tag")
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    med[key, tag] = field("median_ms"); cpu[key, tag] = field("cpu_ms")
    tps[key, tag] = field("tokens_per_s"); rss[key, tag] = field("peak_rss_kb")
    if (tag == "ours") flt[key] = field("faults_per_step")
}
END {
    fmt = "  %-12s %10s %12s %10s %12s %8s %8s %8s %9s %7s\n"
    printf fmt, "model", "ours ms", "ours tok/s", "torch ms", "torch tok/s", \
        "speedup", "cpu", "ours MB", "torch MB", "faults"
    for (r = 1; r <= n; r++) {
        key = order[r]
        printf fmt, key, ms(med[key, "ours"]), tps[key, "ours"], \
            ms(med[key, "torch"]), tps[key, "torch"] == "" ? "-" : tps[key, "torch"], \
            speedup(med[key, "torch"], med[key, "ours"]), \
            speedup(cpu[key, "torch"], cpu[key, "ours"]), \
            mb(rss[key, "ours"]), mb(rss[key, "torch"]), flt[key]
    }
}' "$gpt_results"
echo "(faults: page faults per timed step of ours, 0 when a steady step takes" \
    "no new pages from the system)"
echo

if [ -n "$load_skip" ]; then
    echo "GPT-2 checkpoint load: skipped, $load_skip"
    echo
else
    if [ "$load_key" = 124M ]; then
        load_what="GPT-2 124M"
    else
        load_what="$load_layers layers (--quick or BENCH_LOAD_LAYERS; GPT-2 124M has 12)"
    fi
    echo "GPT-2 checkpoint load, $load_what: V50257 T1024 C768 H12, tied head," \
        "float32; a process per load, ours and PyTorch's in turn"
    [ -n "$load_torch_skip" ] && echo "PyTorch's rows skipped: $load_torch_skip"
    awk -v base="$load_torch_base_kb" "$awk_field"'
    {
        tag = field("tag")
        if (!(tag in seen)) { seen[tag] = 1; order[++n] = tag }
        failed[tag] = field("failed") != ""
        t[tag] = field("load_s"); c[tag] = field("cpu_s"); rss[tag] = field("peak_rss_kb")
        po[tag] = field("peak_over_model"); rounds = field("rounds"); mib = field("model_mib")
    }
    # the smaller of the two PyTorch medians of a, "" when neither ran
    function fastest(a,   x, y) {
        x = a["torch_mmap"]; y = a["torch_readinto"]
        if (x == "") return y
        return y != "" && y + 0 < x + 0 ? y : x
    }
    function secs(v) { return v == "" ? "-" : sprintf("%.3f", v) }
    END {
        name["ours"] = "tapegrad, .safetensors"
        name["ours_llmc"] = "tapegrad, llm.c .bin"
        name["torch_mmap"] = "PyTorch, mmap + load_state_dict"
        name["torch_readinto"] = "PyTorch, readinto"
        fmt = "  %-32s %8s %8s %9s %10s %8s %8s\n"
        printf fmt, "variant", "load s", "cpu s", "peak RSS", "peak over", "speedup", "speedup"
        printf fmt, "", "", "", "MB", "model", "wall", "cpu time"
        bt = fastest(t); bc = fastest(c)
        for (r = 1; r <= n; r++) {
            tag = order[r]
            if (failed[tag]) { printf fmt, name[tag], "failed", "", "", "", "", ""; continue }
            mine = tag ~ /^ours/
            printf fmt, name[tag], secs(t[tag]), secs(c[tag]), mb(rss[tag]), \
                sprintf("%.3fx", po[tag]), mine ? speedup(bt, t[tag]) : "", \
                mine ? speedup(bc, c[tag]) : ""
        }
        printf "(%s rounds, the median of each statistic on its own; the model: %s MiB of", rounds, mib
        printf " parameters; peak RSS: of the whole process, its program included"
        if (base != "") printf " (Python with torch imported: %.1f MB before any load)", base / 1024
        print "; load s and cpu s: the load alone, not the process start-up (nor" \
            " Python importing torch); the files just written, in the page cache;" \
            " speedup: the median of the faster PyTorch variant over ours, > 1 is" \
            " faster than PyTorch)"
    }' "$load_results"
    echo
fi

echo "custom op overhead: one step of y = 2x (forward, sum, backward, the" \
    "gradient dropped), float32, 1 thread, through the built-in op and" \
    "through a custom op calling it (tg_custom; torch.autograd.Function)"
awk "$awk_field"'
{
    key = field("key"); tag = field("tag")
    if (key == "-") next # a failed run, reported on stderr
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    med[key, tag] = field("median_ms")
}
function ns(v) { return v == "" ? "-" : sprintf("%.0f", v * 1e6) }
function ratio(a, b) { return a == "" || b == "" || b + 0 <= 0 ? "-" : sprintf("%.2f", a / b) }
END {
    fmt = "  %9s %11s %11s %8s %11s %11s %8s %9s\n"
    printf fmt, "n", "tapegrad", "tapegrad", "ratio", "torch", "torch", "ratio", "speedup"
    printf fmt, "", "builtin ns", "custom ns", "", "builtin ns", "Function ns", "", "custom"
    for (r = 1; r <= n; r++) {
        k = order[r]
        tb = med[k, "tapegrad-builtin"]; tc = med[k, "tapegrad-custom"]
        pb = med[k, "torch-builtin"]; pf = med[k, "torch-function"]
        printf fmt, k, ns(tb), ns(tc), ratio(tc, tb), ns(pb), ns(pf), \
            ratio(pf, pb), speedup(pf, tc)
    }
}' "$custom_results"
echo "(ns per step, the median of the rounds' medians; ratio: custom over" \
    "built-in, the custom op's fixed cost where it is above 1; speedup:" \
    "torch's Function time over tapegrad's custom op time)"
echo

echo "second order: HVP and JVP against forward+backward (the head's MSE loss" \
    "at medium (32,128,128,32), 1 thread; HVP, JVP and fwd-over-rev as" \
    "functions of W_q along a random v; ms per call)"
awk "$awk_field"'
{
    key = field("key"); tag = field("tag")
    if (key == "-") next # a failed run, reported on stderr
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    failed[key, tag] = field("failed") != ""
    med[key, tag] = field("median_ms"); cpu[key, tag] = field("cpu_ms")
}
function cell(a, k, t) { return failed[k, t] ? "failed" : a[k, t] == "" ? "-" : sprintf("%.2f", a[k, t]) }
function ratio(a, k, t, u, v) {
    return a[k, t] == "" || a[u, v] == "" || a[u, v] + 0 <= 0 ? "-" : sprintf("%.2f", a[k, t] / a[u, v])
}
# one row: the ms of impl, and its ratios to its own forward+backward (and
# jvp to its forward)
function row(label, k, impl) {
    printf fmt, k, label, cell(med, k, impl "-fwd"), cell(med, k, impl "-fwdbwd"), \
        cell(med, k, impl "-hvp"), cell(med, k, impl "-fwdrev"), cell(med, k, impl "-jvp"), \
        ratio(med, k, impl "-hvp", k, impl "-fwdbwd"), ratio(med, k, impl "-fwdrev", k, impl "-fwdbwd"), \
        ratio(med, k, impl "-jvp", k, impl "-fwdbwd"), ratio(med, k, impl "-jvp", k, impl "-fwd")
}
# the time of tapegrad over that of torch, way by way, from a (med or cpu)
function versus(label, k, a,   w, i, c) {
    split("fwd fwdbwd hvp fwdrev jvp", w, " ")
    for (i = 1; i <= 5; i++) c[i] = ratio(a, k, "tapegrad-" w[i], k, "torch-" w[i])
    printf fmt, k, label, c[1], c[2], c[3], c[4], c[5], "", "", "", ""
}
END {
    fmt = "  %-5s %-22s %8s %8s %8s %9s %8s %7s %9s %7s %7s\n"
    printf fmt, "dtype", "", "fwd", "fwd+bwd", "hvp", "fwd/rev", "jvp", \
        "hvp/fb", "fwdrev/fb", "jvp/fb", "jvp/fwd"
    for (r = 1; r <= n; r++) {
        k = order[r]
        row("tapegrad ms", k, "tapegrad")
        if (!((k, "torch-fwdbwd") in med)) continue
        row("torch ms", k, "torch")
        printf fmt, k, "torch functional.hvp", "", "", cell(med, k, "torch-hvpfunc"), "", "", \
            ratio(med, k, "torch-hvpfunc", k, "torch-fwdbwd"), "", "", ""
        versus("tapegrad/torch time", k, med)
        versus("  by CPU time", k, cpu)
    }
}' "$so_results"
if [ -s "$so_checks" ]; then
    awk '{ printf "%s%s %s: %s %s", (NR > 1 ? "; " : "(checks, relative: "), \
        substr($2, 6), substr($4, 7), $5, $6 } END { print ")" }' "$so_checks"
fi
echo "(the median of the rounds' medians; fb: forward+backward, the three" \
    "weights requiring grad; hvp: reverse over reverse, tg_hvp and torch's" \
    "double backward; fwd/rev: H v as tg_jvp of tg_grads(TG_CREATE_GRAPH)," \
    "functorch.jvp(grad) in torch; jvp: tg_jvp, torch.autograd.forward_ad;" \
    "tapegrad/torch < 1 is faster than PyTorch)"
echo

echo "each op's share of the step (float32, 1 thread; the tape's timing mode," \
    "bench_head --profile / bench_gpt --profile, a run apart from the timed one)"
for name in $profiled; do
    [ -s "$tmp/profile.$name" ] || continue
    awk "$awk_field"'
    $1 == "profile" {
        printf "  %s: %s ms/step over %s steps; matmul (GEMM) %s%%, the rest %.2f%%\n", \
            field("config") == "" ? field("variant") : field("config") " composed head step", \
            field("step_ms"), field("steps"), field("matmul_share"), \
            100 - field("matmul_share")
        printf "    %-26s %8s %11s %11s %8s\n", "op", "calls", "forward ms", "backward ms", "share"
        next
    }
    $1 == "profile_op" {
        op = substr($0, index($0, " op=") + 4)
        printf "    %-26s %8s %11s %11s %7s%%\n", op, field("calls"), \
            field("forward_ms"), field("backward_ms"), field("share")
    }' "$tmp/profile.$name"
done
echo "(an op's forward time runs from the previous op's record to its own;" \
    "\"(backward walk)\" is the engine around the backward functions; the" \
    "entries sum to the profiled step; ms per step)"
echo

# ---- matmul -----------------------------------------------------------------

OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$matmul" --config "$matmul_sizes" |
    tee "$tmp/matmul"
echo

# ---- the issue's targets ------------------------------------------------------

echo "targets (from the issue: PyTorch's time over ours) against this run," \
    "judged by wall time and by CPU time"
awk "$awk_field"'
FILENAME ~ /matmul$/ {
    # "  sgemm FMA peak, alongside: 91.25 GFLOP/s (...)": the FMA loop timed
    # in turn with the products below, the peak their % is of
    if (($1 == "sgemm" || $1 == "dgemm") && $2 == "FMA")
        along[$1 == "sgemm" ? "f32" : "f64"] = $5
    # "  sgemm ours :  1 thread  72.40 GFLOP/s (29.6 ms; by CPU time 72.44, 78.2% of the peak alongside)  2 threads ..."
    if (($1 == "sgemm" || $1 == "dgemm") && ($2 == "ours" || $2 == "BLAS")) {
        dt = ($1 == "sgemm" ? "f32" : "f64") ($2 == "BLAS" ? "blas" : "")
        for (i = 3; i < NF; i++) {
            if ($i == "thread") ref[dt, 1] = $(i + 1)
            if ($i == "threads") ref[dt, 2] = $(i + 1)
            # + 0: sub() leaves v a string, and strings compare as text
            # ("158.7" < "96.4")
            if ($i == "time") { v = $(i + 1); sub(/[),]$/, "", v); refcpu[dt] = v + 0 }
        }
    }
    next
}
FILENAME ~ /peak$/ {
    peak32 = field("fma_f32_gflops"); peak64 = field("fma_f64_gflops")
    next
}
FILENAME ~ /load$/ {
    # the checkpoint loads, a line per variant (consolidate_load)
    if (field("failed") != "") next
    tag = field("tag"); lkey = field("key")
    lt[tag] = field("load_s"); lc[tag] = field("cpu_s"); lpo[tag] = field("peak_over_model")
    next
}
{
    src = FILENAME ~ /prescott$/ ? "p" : FILENAME ~ /gpt$/ ? "g" : "h"
    key = src ":" field("key"); tag = field("tag")
    med[key, tag] = field("median_ms"); cpu[key, tag] = field("cpu_ms")
    rss[key, tag] = field("peak_rss_kb")
}
function verdict(ok) { return ok == "" ? "-" : ok ? "met" : "MISSED" }
function check(what, value, goal, wall_ok, cpu_ok) {
    printf "  %-46s %-26s %-10s %-7s %s\n", what, value, goal, verdict(wall_ok), verdict(cpu_ok)
}
# ours against the faster PyTorch run of key (tag "ours" or another path),
# target: speedup >= goal
function vs_torch(key, tag, goal, label,   b, bc, w, c) {
    b = best(med, key); bc = best(cpu, key)
    if (med[key, tag] == "" || b == "") return
    w = b / med[key, tag]; c = bc / cpu[key, tag]
    check(label, sprintf("%.2fx (cpu %.2fx)", w, c), ">= " goal "x", w >= goal, c >= goal)
}
END {
    printf "  %-46s %-26s %-10s %-7s %s\n", "", "measured", "target", "wall", "cpu"
    n = split("tiny 15 small 2 medium 1.4 large 1.25 xl 1.3", goals, " ")
    for (i = 1; i < n; i += 2)
        vs_torch("h:" goals[i] "/f32/1t", "ours", goals[i + 1], goals[i] "/f32/1t composed head step")
    vs_torch("h:xl/f32/1t", "tiled", 1.8, "xl/f32/1t with tg_attention (tiled)")
    key = "p:large/f32/1t"
    if (med[key, "ours"] != "" && med[key, "torch"] != "") {
        w = med[key, "torch"] / med[key, "ours"]; c = cpu[key, "torch"] / cpu[key, "ours"]
        check("large/f32/1t, OPENBLAS_CORETYPE=Prescott", sprintf("%.2fx (cpu %.2fx)", w, c), ">= 2.5x", w >= 2.5, c >= 2.5)
    }
    # the GPTs: model, thread count, target over PyTorch
    n = split("tiny 1 2 tiny 2 2 small 1 1.5 small 2 2.5 gpt2 1 2 gpt2 2 2.5", gg, " ")
    for (i = 1; i < n; i += 3) {
        key = "g:" gg[i] "/" gg[i + 1] "t"; t = gg[i + 1]
        if (med[key, "ours"] == "" || med[key, "torch"] == "") continue
        w = med[key, "torch"] / med[key, "ours"]; c = cpu[key, "torch"] / cpu[key, "ours"]
        check((gg[i] == "tiny" ? "tiny_gpt" : gg[i]) " tokens/s, " t " thread" (t > 1 ? "s" : ""), sprintf("%.2fx (cpu %.2fx)", w, c), ">= " gg[i + 2] "x", w >= gg[i + 2], c >= gg[i + 2])
    }
    one = med["g:gpt2/1t", "ours"]; two = med["g:gpt2/2t", "ours"]
    if (one != "" && two != "")
        check("gpt2 (124M), 2 threads over 1", sprintf("%.2fx", one / two), ">= 1.8x", one / two >= 1.8, "")
    key = "g:gpt2/1t"
    if (rss[key, "ours"] != "")
        check("gpt2 (124M) B4 T64 peak RSS MB", mb(rss[key, "ours"]), "<= 2458", rss[key, "ours"] <= 2.4 * 1024 * 1024, "")
    key32 = "h:large/f32/1t"; key64 = "h:large/f64/1t"
    if (med[key32, "ours"] != "" && med[key64, "ours"] != "") {
        w = med[key64, "ours"] / med[key32, "ours"]; c = cpu[key64, "ours"] / cpu[key32, "ours"]
        check("large/1t float64 time / float32 time", sprintf("%.2fx (cpu %.2fx)", w, c), "<= 2.2x", w <= 2.2, c <= 2.2)
    }
    # the peak measured alongside the products when there is one, else the
    # one measured at the start
    if (along["f32"] != "") peak32 = along["f32"]
    if (along["f64"] != "") peak64 = along["f64"]
    if (ref["f32", 1] != "" && peak32 != "") {
        w = ref["f32", 1] / peak32
        c = refcpu["f32"] != "" ? refcpu["f32"] / peak32 : ""
        check("sgemm 1024^3 1 thread / FMA peak " peak32, c == "" ? sprintf("%.0f%%", 100 * w) : sprintf("%.0f%% (cpu %.0f%%)", 100 * w, 100 * c), ">= 90%", w >= 0.9, c == "" ? "" : c >= 0.9)
    }
    if (refcpu["f64"] != "" && peak64 != "")
        check("dgemm 1024^3 1 thread / FMA peak " peak64, sprintf("%.0f%% (cpu %.0f%%)", 100 * ref["f64", 1] / peak64, 100 * refcpu["f64"] / peak64), ">= 90%", ref["f64", 1] / peak64 >= 0.9, refcpu["f64"] / peak64 >= 0.9)
    for (d = 1; d <= 2; d++) {
        dt = d == 1 ? "f32" : "f64"
        if (refcpu[dt] != "" && refcpu[dt "blas"] != "")
            check((d == 1 ? "s" : "d") "gemm 1024^3 1 thread, ours / OpenBLAS", sprintf("%.2fx (cpu %.2fx)", ref[dt, 1] / ref[dt "blas", 1], refcpu[dt] / refcpu[dt "blas"]), ">= 1x", ref[dt, 1] >= ref[dt "blas", 1], refcpu[dt] >= refcpu[dt "blas"])
    }
    n = split("large xl", big, " ")
    for (i = 1; i <= n; i++) {
        one = med["h:" big[i] "/f32/1t", "ours"]; two = med["h:" big[i] "/f32/2t", "ours"]
        if (one != "" && two != "")
            check(big[i] "/f32 composed, 2 threads over 1", sprintf("%.2fx", one / two), ">= 1.8x", one / two >= 1.8, "")
    }
    # loading GPT-2: the peak RSS over the bytes of the parameters, the time
    # against the faster of the two PyTorch ways
    lname = lkey == "124M" ? "gpt2 (124M)" : "gpt2 " lkey
    bt = lt["torch_mmap"]; if (bt == "" || (lt["torch_readinto"] != "" && lt["torch_readinto"] + 0 < bt + 0)) bt = lt["torch_readinto"]
    bc = lc["torch_mmap"]; if (bc == "" || (lc["torch_readinto"] != "" && lc["torch_readinto"] + 0 < bc + 0)) bc = lc["torch_readinto"]
    n = split("ours safetensors ours_llmc llm.c", lv, " ")
    for (i = 1; i < n; i += 2) {
        tag = lv[i]
        if (lpo[tag] != "")
            check(lname " load peak RSS / model, " lv[i + 1], sprintf("%.3fx", lpo[tag]), "<= 1.2x", lpo[tag] <= 1.2, "")
        if (lt[tag] + 0 > 0 && lc[tag] + 0 > 0 && bt != "" && bc != "") {
            w = bt / lt[tag]; c = bc / lc[tag]
            check(lname " load time, " lv[i + 1], sprintf("%.2fx (cpu %.2fx)", w, c), ">= 1x", w >= 1, c >= 1)
        }
    }
    # peak RSS: reported, no target
    n = split("tiny small medium large xl", sz, " ")
    for (i = 1; i <= n; i++) {
        key = "h:" sz[i] "/f32/1t"
        if (rss[key, "ours"] == "") continue
        t = rss[key, "torch"]
        if (med[key, "tuned"] != "" && med[key, "tuned"] + 0 < med[key, "torch"] + 0) t = rss[key, "tuned"]
        check(sz[i] "/f32/1t peak RSS, ours / torch MB", mb(rss[key, "ours"]) " / " mb(t), "reported", "", "")
    }
}' "$tmp/peak" "$results" "$prescott" "$gpt_results" "$load_results" \
    "$tmp/matmul"
echo "(2-thread numbers need 2 idle cores: on a loaded machine they measure" \
    "the load; the load average is printed at the start and below)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
