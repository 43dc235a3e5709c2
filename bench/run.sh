#!/bin/sh
# bench/run.sh: what `make bench` runs, from the build directory.
#
# For each configuration (size x dtype x threads), interleaved so that load
# on the machine falls on all of them alike:
#   1. bench/bench_head           tapegrad's attention-head training step
#   2. bench/bench_head --path tiled
#                                 the same with the fused, tiled attention
#                                 op (tg_attention), when `bench_head --path
#                                 tiled --config tiny` works
#   3. bench/peer_torch.py        PyTorch as installed
#   4. bench/peer_torch.py        PyTorch with glibc's allocator tuned (no
#                                 trimming, big mmap threshold, huge pages)
# each in its own process (so peak RSS is that configuration's). Then one
# table, ratios against the faster PyTorch; then bench/bench_matmul's table;
# then the issue's targets beside what was measured.
#
#   run.sh [--quick]      --quick (or BENCH_QUICK=1): tiny, small, medium in
#                         float32 on 1 thread, and the matmul table at medium
# Environment: BENCH_PYTHON (default /usr/bin/python3, Debian's python3-torch),
# BENCH_SECONDS (timed budget per run, default 1.5), BENCH_SIZES,
# BENCH_DTYPES, BENCH_THREADS (lists overriding the defaults below).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are passed through untouched;
# OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are set per configuration.
#
# Programs are found relative to the current directory (the build dir),
# bench/peer_torch.py relative to this script.
set -u

here=$(cd "$(dirname "$0")" && pwd)
head=./bench/bench_head
matmul=./bench/bench_matmul
peer=$here/peer_torch.py
python=${BENCH_PYTHON:-/usr/bin/python3}
seconds=${BENCH_SECONDS:-1.5}
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

for prog in "$head" "$matmul"; do
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
else
    sizes=${BENCH_SIZES:-tiny small medium large xl}
    dtypes=${BENCH_DTYPES:-f32 f64}
    threads_list=${BENCH_THREADS:-1 2}
    matmul_sizes=tiny,small,medium,large,xl
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
results=$tmp/results

# ---- what is there to compare ---------------------------------------------

have_torch=0
if "$python" -c 'import torch' >/dev/null 2>"$tmp/err"; then
    have_torch=1
fi
have_fused=0
if "$head" --path tiled --config tiny --seconds 0.01 >/dev/null 2>"$tmp/fused_err"; then
    have_fused=1
fi

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
echo "per run: warm-up >= 2 steps and 0.25 s, then ~${seconds} s of steps" \
    "(>= 3) timed one by one; ms are medians"
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
        printf '%s key=%s tag=%s\n' "$line" "$key" "$impl" >>"$results"
    else
        printf 'bench key=%s tag=%s failed=1\n' "$key" "$impl" >>"$results"
        echo "run.sh: $impl $key failed:" >&2
        sed 's/^/  /' "$tmp/err" >&2
    fi
}

# The median of KEY's IMPL run, for the progress line.
median_of() {
    awk -v key="$1" -v impl="$2" '
        index($0, " key=" key " tag=" impl) {
            for (i = 1; i <= NF; i++)
                if ($i ~ /^median_ms=/) { sub(/^median_ms=/, "", $i); m = $i }
        }
        END { print (m == "" ? "-" : m) }' "$results"
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
            set -- --config "$s" --dtype "$d" --threads "$t" --seconds "$seconds"
            measure "$key" ours "$t" "$head" "$@"
            if [ "$have_fused" = 1 ]; then
                measure "$key" fused "$t" "$head" --path tiled "$@"
            fi
            if [ "$have_torch" = 1 ]; then
                measure "$key" torch "$t" "$python" "$peer" "$@"
                measure "$key" tuned "$t" env "GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}$tuned" \
                    "$python" "$peer" --impl torch-tuned "$@"
            fi
            fused_ms=
            if [ "$have_fused" = 1 ]; then
                fused_ms=" (fused $(median_of "$key" fused))"
            fi
            echo "[$i/$n_configs] $key: tapegrad $(median_of "$key" ours)$fused_ms ms," \
                "torch $(median_of "$key" torch) ms," \
                "tuned $(median_of "$key" tuned) ms" >&2
        done
    done
done

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
}'

echo "attention head, one training step (forward, MSE, backward, AdamW, zero grad)"
awk "$awk_field"'
function ms(v) {
    if (v == "") return "-"
    return v < 1 ? sprintf("%.4f", v) : v < 10 ? sprintf("%.3f", v) : \
           v < 100 ? sprintf("%.2f", v) : sprintf("%.1f", v)
}
function mb(kb) { return kb == "" ? "-" : sprintf("%.1f", kb / 1024) }
{
    key = field("key"); tag = field("tag")
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    failed[key, tag] = field("failed") != ""
    med[key, tag] = field("median_ms"); lo[key, tag] = field("min_ms")
    hi[key, tag] = field("max_ms"); gf[key, tag] = field("gflops")
    cpu[key, tag] = field("cpu_ms"); rss[key, tag] = field("peak_rss_kb")
}
END {
    fmt = "%-18s %-30s %8s %9s %10s %10s %9s %8s %8s\n"
    printf fmt, "config", "tapegrad ms median (min-max)", "GFLOP/s", \
        "peak RSS", "torch ms", "tuned ms", "torch RSS", "ratio", "ratio"
    printf fmt, "", "", "", "MB", "", "", "MB", "vs best", "cpu time"
    for (r = 1; r <= n; r++) {
        key = order[r]
        b = best(med, key); bc = best(cpu, key)
        trss = rss[key, "torch"]
        if (med[key, "tuned"] != "" && med[key, "tuned"] + 0 < med[key, "torch"] + 0)
            trss = rss[key, "tuned"]
        for (v = 1; v <= 2; v++) {
            tag = v == 1 ? "ours" : "fused"
            if (!((key, tag) in med)) continue
            name = v == 1 ? key : key " fused"
            if (failed[key, tag]) { printf fmt, name, "failed", "", "", "", "", "", "", ""; continue }
            spread = ms(med[key, tag]) " (" ms(lo[key, tag]) "-" ms(hi[key, tag]) ")"
            printf fmt, name, spread, gf[key, tag], mb(rss[key, tag]), \
                v == 1 ? ms(med[key, "torch"]) : "", v == 1 ? ms(med[key, "tuned"]) : "", \
                v == 1 ? mb(trss) : "", \
                b == "" ? "-" : sprintf("%.3f", med[key, tag] / b), \
                bc == "" || cpu[key, tag] == "" ? "-" : sprintf("%.3f", cpu[key, tag] / bc)
        }
    }
}' "$results"
echo "(ratio: tapegrad median / the faster PyTorch median, by wall time and by" \
    "the process's CPU time (all threads; the steadier one on a loaded" \
    "machine, for 1 thread); torch RSS: the faster run's peak; GFLOP/s: the" \
    "six matmuls, forward and backward, at the wall median)"
echo

# ---- matmul -----------------------------------------------------------------

OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$matmul" --config "$matmul_sizes" |
    tee "$tmp/matmul"
echo

# ---- the issue's targets ------------------------------------------------------

echo "targets (from the issue) against this run, judged by wall time and by CPU time"
awk "$awk_field"'
FILENAME ~ /matmul$/ {
    # "  sgemm:  1 thread  16.60 GFLOP/s (129.34 ms; by CPU time 17.00)  2 threads  15.94 ..."
    if ($1 == "sgemm:" || $1 == "dgemm:") {
        dt = $1 == "sgemm:" ? "f32" : "f64"
        for (i = 2; i < NF; i++) {
            if ($i == "thread") ref[dt, 1] = $(i + 1)
            if ($i == "threads") ref[dt, 2] = $(i + 1)
            if ($i == "time") { v = $(i + 1); sub(/\)$/, "", v); refcpu[dt] = v }
        }
    }
    # size, product (words), shapes, ours ms, BLAS ms, ours/BLAS, cpu, GF/s, GF/s
    if ($0 ~ /^(tiny|small|medium|large|xl) / && NF >= 10) {
        if (!($1 in worst)) { worst[$1] = 0; sizes[++nsizes] = $1 }
        if ($(NF - 3) + 0 > worst[$1] + 0) {
            worst[$1] = $(NF - 3); worst_cpu[$1] = $(NF - 2); product = $2
            for (i = 3; i <= NF - 7; i++) product = product " " $i
            worst_product[$1] = product
        }
    }
    next
}
{
    key = field("key"); tag = field("tag")
    med[key, tag] = field("median_ms"); cpu[key, tag] = field("cpu_ms")
    gf[key, tag] = field("gflops")
}
function verdict(ok) { return ok == "" ? "-" : ok ? "met" : "MISSED" }
function check(what, value, goal, wall_ok, cpu_ok) {
    printf "  %-46s %-26s %-17s %-7s %s\n", what, value, goal, verdict(wall_ok), verdict(cpu_ok)
}
function vs_torch(key, limit, goal,   b, bc, w, c) {
    b = best(med, key); bc = best(cpu, key)
    if (med[key, "ours"] == "" || b == "") return
    w = med[key, "ours"] / b; c = cpu[key, "ours"] / bc
    check(key " vs best torch", sprintf("%.3fx (cpu %.3fx)", w, c), goal, w <= limit, c <= limit)
}
END {
    printf "  %-46s %-26s %-17s %-7s %s\n", "", "measured", "target", "wall", "cpu"
    vs_torch("tiny/f32/1t", 1 / 15, "<= 1/15 (0.067x)")
    vs_torch("small/f32/1t", 0.5, "<= 0.5x"); vs_torch("medium/f32/1t", 0.8, "<= 0.8x")
    vs_torch("large/f32/1t", 0.85, "<= 0.85x"); vs_torch("xl/f32/1t", 0.6, "<= 0.6x")
    n = split("large xl", big, " ")
    for (i = 1; i <= n; i++) for (t = 1; t <= 2; t++) {
        key = big[i] "/f32/" t "t"
        if (gf[key, "ours"] == "" || ref["f32", t] == "") continue
        w = gf[key, "ours"] / ref["f32", t]
        if (t == 1 && refcpu["f32"] != "" && cpu[key, "ours"] > 0) {
            c = gf[key, "ours"] * med[key, "ours"] / cpu[key, "ours"] / refcpu["f32"]
            check(key " GFLOP/s / sgemm 1024^3", sprintf("%.0f%% (cpu %.0f%%)", 100 * w, 100 * c), ">= 60%", w >= 0.6, c >= 0.6)
        } else
            check(key " GFLOP/s / sgemm 1024^3", sprintf("%.0f%%", 100 * w), ">= 60%", w >= 0.6, "")
    }
    for (i = 1; i <= n; i++) {
        one = med[big[i] "/f32/1t", "ours"]; two = med[big[i] "/f32/2t", "ours"]
        if (one != "" && two != "")
            check(big[i] "/f32 speedup, 2 threads over 1", sprintf("%.2fx", one / two), ">= 1.7x", one / two >= 1.7, "")
    }
    key32 = "large/f32/1t"; key64 = "large/f64/1t"
    if (med[key32, "ours"] != "" && med[key64, "ours"] != "") {
        w = med[key64, "ours"] / med[key32, "ours"]; c = cpu[key64, "ours"] / cpu[key32, "ours"]
        check("large/1t float64 / float32", sprintf("%.2fx (cpu %.2fx)", w, c), "<= 2.2x", w <= 2.2, c <= 2.2)
    }
    for (i = 1; i <= nsizes; i++) {
        sz = sizes[i]
        check("matmul " sz ": worst, " worst_product[sz], sprintf("%sx (cpu %sx)", worst[sz], worst_cpu[sz]), "<= 1.10x", worst[sz] + 0 <= 1.10, worst_cpu[sz] + 0 <= 1.10)
    }
}' "$results" "$tmp/matmul"
echo "(2-thread numbers need 2 idle cores: on a loaded machine they measure" \
    "the load; the load average is printed at the start and below)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
