#!/bin/sh
# bench_dist.sh: `make bench-dist`. Data-parallel training steps per second
# (bench/bench_dist) for bench_head's large head and tiny_gpt's default
# model, as 1 rank x 1 thread, 1 rank x 2 threads and 2 ranks x 1 thread
# (mpirun -np 2), the last with the all-reduce overlapped with backward
# (tg_ddp_backward; buckets of 25 MiB and of 64 KiB) and blocking after it
# (tg_dist_allreduce_grads); and the share of the step spent waiting for the
# all-reduce, and (early/bkts) how many of a step's buckets had finished
# their all-reduce before that wait. Each configuration
# runs RUNS times (3; BENCH_QUICK=1: 1); the table gives the medians.
#
# Threads: OMP_NUM_THREADS (the library's pool, core/parallel.c) and
# OPENBLAS_NUM_THREADS (the matmuls). The ranks are not bound to cores
# (--bind-to none), as the one-rank runs are not, and a rank waiting in MPI
# yields its core (mpi_yield_when_idle) instead of spinning on it: the
# machine is shared.
#
# Run from the build directory: bench/bench_dist must be built (make
# bench-dist does it). Without mpirun, or a library without MPI, only the
# one-rank rows are measured.

: "${top_srcdir:=.}"
prog=./bench/bench_dist
steps=${BENCH_DIST_STEPS:-20}
runs=3
[ -n "${BENCH_QUICK:-}" ] && runs=1 && steps=8
if [ ! -x "$prog" ]; then
    echo "bench_dist.sh: missing $prog (make bench-dist builds it)" >&2
    exit 1
fi
tmp="${TMPDIR:-/tmp}/bench_dist.$$"
mkdir "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

# Open MPI refuses root without these (a container's only user).
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
mpi=
if command -v mpirun >/dev/null 2>&1 && [ -r config.h ] &&
    grep -q '^#define TG_HAVE_MPI 1' config.h; then
    mpi=yes
else
    echo "bench_dist.sh: no mpirun or a library without MPI (configure" \
        "--with-mpi): one rank only" >&2
fi
limit=
command -v timeout >/dev/null 2>&1 && limit="timeout 600"

# one LABEL RANKS THREADS ARGS...: RUNS runs, their lines into $tmp/LABEL
one() {
    label=$1 ranks=$2 threads=$3
    shift 3
    i=0
    while [ $i -lt $runs ]; do
        if [ "$ranks" -eq 1 ]; then
            OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads \
                $limit "$prog" --steps "$steps" "$@"
        else
            OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads \
                $limit mpirun -np "$ranks" --bind-to none \
                --mca mpi_yield_when_idle 1 \
                -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
                "$prog" --steps "$steps" "$@"
        fi
        i=$((i + 1))
    done >"$tmp/$label" || {
        echo "bench_dist.sh: $label failed" >&2
        exit 1
    }
}

for model in head gpt; do
    # one rank: no all-reduce, backward timed around tg_backward
    one "$model.1x1" 1 1 --model $model --allreduce blocking
    one "$model.1x2" 1 2 --model $model --allreduce blocking
    if [ -n "$mpi" ]; then
        one "$model.2x1.overlap" 2 1 --model $model --allreduce overlap
        one "$model.2x1.blocking" 2 1 --model $model --allreduce blocking
        # the default buckets (25 MiB) hold either model whole: its one
        # all-reduce starts when backward ends; small ones overlap
        one "$model.2x1.overlap-64KiB" 2 1 --model $model --allreduce overlap \
            --bucket-kb 64
    fi
done

echo "bench_dist: $runs runs of $steps steps each, medians; $(nproc) cores," \
    "$(uptime | sed 's/.*load average/load average/')"
printf '%-5s %-9s %-16s %8s %9s %8s %12s %9s %7s %12s\n' model "ranks x" \
    allreduce steps/s ms/step cpu_ms backward_ms wait_ms "wait %" \
    "early/bkts"
for f in "$tmp"/*; do
    label=${f##*/}
    awk -v label="$label" '
        function med(a, n,   i, j, t) {
            for (i = 2; i <= n; i++)
                for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
                    t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
                }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        /^bench_dist / {
            n++
            for (i = 2; i <= NF; i++) {
                split($i, kv, "=")
                v[kv[1], n] = kv[2]
            }
        }
        END {
            split(label, p, ".")
            split("steps_per_s median_ms cpu_ms backward_ms wait_ms wait_share " \
                  "backward_cpu_ms early", keys)
            for (k = 1; k <= 8; k++) {
                for (i = 1; i <= n; i++) a[i] = v[keys[k], i]
                m[k] = med(a, n)
            }
            split(p[2], rt, "x")
            bk = p[3] ~ /^overlap/ ? sprintf("%.1f/%d", m[8], v["buckets", 1]) : "-"
            printf "%-5s %-9s %-16s %8.2f %9.2f %8.2f %12.2f %9.2f %7.1f %12s\n",
                p[1], rt[1] " x " rt[2], p[3] == "" ? "-" : p[3], m[1], m[2],
                m[3], m[4], m[5], m[6], bk
            if (p[2] == "1x1")
                printf "%s: %s parameters, %s gradient bytes; backward %.3g " \
                    "ns of CPU time per gradient byte (1 thread; %.3g " \
                    "wall)\n", p[1], v["params", 1], v["grad_bytes", 1],
                    1e6 * m[7] / v["grad_bytes", 1],
                    1e6 * m[4] / v["grad_bytes", 1] >>notes
        }' notes="$tmp.notes" "$f"
done
[ -r "$tmp.notes" ] && cat "$tmp.notes" && rm -f "$tmp.notes"
exit 0
