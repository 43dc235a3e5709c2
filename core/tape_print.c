/* The tape shown, for teaching: what the backward walk notes of the
 * gradient reaching each entry (its norm |g| and its exact zeros, when
 * asked), and the tape as text (tg_tape_print) and as a Graphviz drawing
 * (tg_tape_dot). The printouts read the tape under its lock
 * (tg__tape_lock): no entry leaves it meanwhile, whichever thread drops
 * its output. */
#include "core/tape_state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- what the walk notes ------------------------------------------------ */

static TG_THREAD_LOCAL bool record_norms; /* tg_tape_record_norms */

bool tg_tape_record_norms(bool on)
{
    bool was = record_norms;
    record_norms = on;
    return was;
}

/* |g| for the tape's printout: the sum of squares in double. A contiguous g
 * (as gradients are) is cut into blocks whose size depends on its length
 * alone, each summed with eight running sums (eight additions in flight,
 * not one), the blocks in parallel when g is large and their sums added in
 * order: the same bits with any number of threads. */
enum { NORM_BLOCKS = 256, NORM_BLOCK_MIN = 4096 };

typedef struct norm_job {
    const tg_tensor *g;
    int64_t n, block;
    double *part; /* one sum per block */
} norm_job;

/* the square of p[i + k], in double */
#define SQ(k) ((double)p[i + (k)] * (double)p[i + (k)])

static void norm_blocks(void *job, int64_t lo, int64_t hi)
{
    const norm_job *j = job;
    TG_DISPATCH_FLOAT(j->g->dtype, T, {
        const T *p = TG_DATA(T, j->g);
        for (int64_t b = lo; b < hi; b++) {
            int64_t i = b * j->block;
            int64_t end = j->n - i < j->block ? j->n : i + j->block;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0,
                   s7 = 0;
            for (; i + 8 <= end; i += 8) {
                s0 += SQ(0), s1 += SQ(1), s2 += SQ(2), s3 += SQ(3);
                s4 += SQ(4), s5 += SQ(5), s6 += SQ(6), s7 += SQ(7);
            }
            for (; i < end; i++)
                s0 += SQ(0);
            j->part[b] = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
        }
    });
}
#undef SQ

double tg__sum_squares(const tg_tensor *g)
{
    double s = 0;
    if (tg_is_contiguous(g)) {
        int64_t n = tg_numel(g);
        int64_t block = (n + NORM_BLOCKS - 1) / NORM_BLOCKS;
        block = block < NORM_BLOCK_MIN ? NORM_BLOCK_MIN : block;
        int64_t blocks = (n + block - 1) / block;
        double part[NORM_BLOCKS];
        tg__parallel_for(blocks, n, norm_blocks,
                         &(norm_job){g, n, block, part});
        for (int64_t b = 0; b < blocks; b++)
            s += part[b];
        return s;
    }
    tg_loop L;
    tg__loop_init(&L, g->ndim, g->shape, 1, (const tg_tensor *const[]){g});
    TG_DISPATCH_FLOAT(g->dtype, T, {
        do {
            const T *p = TG_DATA(T, g) + L.off[0];
            for (int64_t i = 0; i < L.inner; i++)
                s += (double)p[i * L.step[0]] * (double)p[i * L.step[0]];
        } while (tg__loop_next(&L));
    });
    return s;
}

/* For the printouts (tg_tape_print, tg_tape_dot): the norm |g| =
 * sqrt(sum g_i^2) of the gradient that reached n's output, and how many of
 * its elements are exactly 0 (where a mask, a ReLU or a max cut the path:
 * the zeros a teacher points at). */
static void record_grad_stats(tg_node *n, const tg_tensor *g)
{
    n->grad_norm = sqrt(tg__sum_squares(g));
    n->grad_numel = tg_numel(g);
    int64_t zeros = 0;
    if (n->grad_numel > 0) {
        tg_loop L;
        tg__loop_init(&L, g->ndim, g->shape, 1, (const tg_tensor *const[]){g});
        TG_DISPATCH_FLOAT(g->dtype, T, {
            do {
                const T *p = TG_DATA(T, g) + L.off[0];
                for (int64_t i = 0; i < L.inner; i++)
                    zeros += p[i * L.step[0]] == 0;
            } while (tg__loop_next(&L));
        });
    }
    n->grad_zeros = zeros;
}

/* A summary of t's values (tg__vstats): min, mean and max of its finite
 * elements, its -inf and other non-finite ones, a bool's trues. */
static void value_stats(const tg_tensor *t, tg__vstats *v)
{
    *v = (tg__vstats){.numel = tg_numel(t), .is_bool = t->dtype == TG_BOOL};
    if (v->numel <= 0 || !t->storage)
        return;
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    int64_t finite = 0;
    tg_loop L;
    tg__loop_init(&L, t->ndim, t->shape, 1, (const tg_tensor *const[]){t});
    TG_DISPATCH_ANY(t->dtype, T, {
        do {
            const T *p = TG_DATA(T, t) + L.off[0];
            for (int64_t i = 0; i < L.inner; i++) {
                double x = (double)p[i * L.step[0]];
                if (isfinite(x)) {
                    lo = x < lo ? x : lo, hi = x > hi ? x : hi, sum += x;
                    finite++;
                } else
                    x == -INFINITY ? v->neg_inf++ : v->nonfinite++;
            }
        } while (tg__loop_next(&L));
    });
    v->min = finite ? lo : NAN;
    v->max = finite ? hi : NAN;
    v->mean = finite ? sum / (double)finite : NAN;
    v->n_true = v->is_bool ? (int64_t)sum : 0;
}

/* The leaves the last walk reached, for the drawing: each one's values and
 * the gradient the walk gave it (a leaf's entries are consumed, and hold
 * it no more, by the time the tape is drawn). A fixed table, so that noting
 * allocates nothing: a teaching tape has a few leaves, and past LEAF_NOTES
 * the others are drawn without their numbers. */
enum { LEAF_NOTES = 64 };

typedef struct leaf_note {
    uint64_t tid;
    tg__vstats val;
    bool requires_grad, has_grad;
    double grad_norm;
    int64_t grad_zeros, grad_numel;
} leaf_note;

/* (_Thread_local of the default model, not TG_THREAD_LOCAL's static TLS:
 * a few KiB, read only by the printouts, must not take the little room
 * glibc keeps for a dlopen'ed library's initial-exec variables) */
static _Thread_local leaf_note leaf_notes[LEAF_NOTES];
static _Thread_local int n_leaf_notes;
static _Thread_local bool notes_done; /* a walk ended: the next starts anew */

/* The note of leaf tid, or NULL. */
static leaf_note *leaf_find(uint64_t tid)
{
    for (int i = 0; i < n_leaf_notes; i++)
        if (leaf_notes[i].tid == tid)
            return &leaf_notes[i];
    return NULL;
}

/* Notes leaf t's values, and its gradient when it has one (the walk's, at
 * the walk's end). */
static void note_leaf(const tg_tensor *t, bool with_grad)
{
    leaf_note *l = leaf_find(t->id);
    if (!l && n_leaf_notes == LEAF_NOTES)
        return;
    if (!l)
        l = &leaf_notes[n_leaf_notes++];
    *l = (leaf_note){.tid = t->id, .requires_grad = t->requires_grad};
    value_stats(t, &l->val);
    if (with_grad && t->grad) {
        l->has_grad = true;
        tg_node tmp = {0};
        record_grad_stats(&tmp, t->grad);
        l->grad_norm = tmp.grad_norm;
        l->grad_zeros = tmp.grad_zeros;
        l->grad_numel = tmp.grad_numel;
    }
}

/* The table starts afresh with each walk: its first note, after the last
 * walk's end. */
static void notes_fresh(void)
{
    if (notes_done) {
        notes_done = false;
        n_leaf_notes = 0;
    }
}

/* Notes n's output's values, its leaf inputs' and its mask's. */
static void note_values(tg_node *n)
{
    notes_fresh();
    value_stats(n->out, &n->val);
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && !n->in[i]->node && !leaf_find(n->in[i]->id))
            note_leaf(n->in[i], false);
    for (int k = 0; n->mask_tid && k < TG_NODE_MAX_SAVED; k++)
        if (n->saved[k] && n->saved[k]->id == n->mask_tid)
            value_stats(n->saved[k], &n->mask_val);
}

void tg__tape_note_grad(tg_node *n, const tg_tensor *g)
{
    if (record_norms || tg__tape_keeps_record()) { /* asked */
        record_grad_stats(n, g);
        note_values(n);
    }
}

void tg__tape_note_leaves(const tg_walk_plan *w, bool ok)
{
    if (!record_norms && !tg__tape_keeps_record())
        return;
    notes_fresh();
    for (int64_t i = 0; ok && i < w->n_leaves; i++)
        if (!w->leaves[i].muted)
            note_leaf(w->leaves[i].leaf, true);
    notes_done = true;
}

/* ---- the printouts ------------------------------------------------------ */

/* Orders numbers, for qsort and bsearch. */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* What the printouts number. Entries are numbered 1, 2, ... in the order
 * the tape holds them (creation order), leaves 1, 2, ... in the order the
 * tensors were made (tg_tensor.id): so a program that runs the same way
 * prints and draws the same text every run (the old drawing named leaves
 * by address). Every lookup is a binary search in a sorted array: an
 * entry's number and the entry itself (for its output's name) by seq, a
 * leaf's number by id; so a tape of N entries is printed and drawn in
 * O(N log N) (a pass along the tape per input was O(N^2): a 20,000-entry
 * tape took seconds). */
typedef struct numbered {
    uint64_t seq; /* first: the key cmp_u64 compares */
    const tg_node *node;
} numbered;

typedef struct numbering {
    numbered *seqs;   /* the entries by seq, sorted (the tape's order) */
    uint64_t *leaves; /* the leaf inputs' tensor ids, sorted, once each */
    size_t n_seqs, n_leaves;
} numbering;

/* The entry seq on the tape, or NULL when it is no longer there. */
static const numbered *entry_of(const numbering *nb, uint64_t seq)
{
    return bsearch(&seq, nb->seqs, nb->n_seqs, sizeof *nb->seqs, cmp_u64);
}

/* The number of entry seq (1-based), 0 when it is no longer on the tape. */
static size_t entry_number(const numbering *nb, uint64_t seq)
{
    const numbered *p = entry_of(nb, seq);
    return p ? (size_t)(p - nb->seqs) + 1 : 0;
}

/* Whether input i of e is drawn as a leaf: no producer on the tape. */
static bool is_leaf_input(const numbering *nb, const tg_node *e, int i)
{
    return !e->in_seq[i] || !entry_number(nb, e->in_seq[i]);
}

static size_t leaf_number(const numbering *nb, uint64_t tid)
{
    const uint64_t *p =
        bsearch(&tid, nb->leaves, nb->n_leaves, sizeof *nb->leaves, cmp_u64);
    return p ? (size_t)(p - nb->leaves) + 1 : 0;
}

/* Numbers the tape from head on (the caller holds its lock). false when
 * out of memory for the arrays. */
static bool number_tape(const tg_node *head, numbering *nb)
{
    *nb = (numbering){0};
    size_t n_in = 0;
    for (const tg_node *e = head; e; e = e->next, nb->n_seqs++)
        n_in += (size_t)e->n_in;
    nb->seqs = tg__malloc((nb->n_seqs ? nb->n_seqs : 1) * sizeof *nb->seqs);
    nb->leaves = tg__malloc((n_in ? n_in : 1) * sizeof *nb->leaves);
    if (!nb->seqs || !nb->leaves) {
        free(nb->seqs);
        free(nb->leaves);
        return false;
    }
    size_t i = 0;
    for (const tg_node *e = head; e; e = e->next)
        nb->seqs[i++] = (numbered){e->seq, e};
    qsort(nb->seqs, nb->n_seqs, sizeof *nb->seqs, cmp_u64);
    for (const tg_node *e = head; e; e = e->next)
        for (int k = 0; k < e->n_in; k++)
            if (e->in_tid[k] && is_leaf_input(nb, e, k))
                nb->leaves[nb->n_leaves++] = e->in_tid[k];
    qsort(nb->leaves, nb->n_leaves, sizeof *nb->leaves, cmp_u64);
    size_t unique = 0;
    for (size_t k = 0; k < nb->n_leaves; k++)
        if (unique == 0 || nb->leaves[unique - 1] != nb->leaves[k])
            nb->leaves[unique++] = nb->leaves[k];
    nb->n_leaves = unique;
    return true;
}

static void numbering_free(numbering *nb)
{
    free(nb->seqs);
    free(nb->leaves);
}

/* An entry's output as the printouts show it: name (or ""), shape. */
static const char *out_name(const tg_node *e)
{
    return e->out ? e->out->name : e->out_name;
}

static const char *out_shape(const tg_node *e, char *buf)
{
    return e->out ? tg__shape_str(e->out->ndim, e->out->shape, buf)
                  : tg__shape_str(e->out_ndim, e->out_shape, buf);
}

/* The name of entry seq's output, or NULL: for its consumers' inputs. */
static const char *producer_name(const numbering *nb, uint64_t seq)
{
    const numbered *p = entry_of(nb, seq);
    return p && out_name(p->node)[0] ? out_name(p->node) : NULL;
}

/* The tape's head, the tape locked (tg__tape_unlock after), and nb
 * numbered, for tg_tape_print and tg_tape_dot; false when out of memory
 * for the numbering, having written oom to f and unlocked the tape. */
static bool numbered_pass(FILE *f, const char *oom, tg_node **head,
                          numbering *nb)
{
    *head = tg__tape_lock();
    if (number_tape(*head, nb))
        return true;
    tg__tape_unlock();
    fputs(oom, f);
    return false;
}

void tg_tape_print(FILE *f)
{
    tg_node *head;
    numbering nb;
    if (!f || !numbered_pass(f, "(tape_print: out of memory)\n", &head, &nb))
        return;
    for (tg_node *e = head; e; e = e->next) {
        char shp[TG_SHAPE_STR];
        fprintf(f, "#%zu %s(", entry_number(&nb, e->seq), e->op->name);
        bool first = true;
        for (int i = 0; i < e->n_in; i++) {
            if (!e->in_tid[i])
                continue;
            tg__shape_str(e->in_ndim[i], e->in_shape[i], shp);
            fputs(first ? "" : ", ", f);
            first = false;
            if (!is_leaf_input(&nb, e, i)) {
                const char *nm = producer_name(&nb, e->in_seq[i]);
                fprintf(f, "#%zu%s%s %s", entry_number(&nb, e->in_seq[i]),
                        nm ? " " : "", nm ? nm : "", shp);
            } else if (e->in_name[i][0])
                fprintf(f, "%s %s", e->in_name[i], shp);
            else
                fprintf(f, "t%zu %s", leaf_number(&nb, e->in_tid[i]), shp);
        }
        fprintf(f, ") -> %s%s%s", out_name(e), out_name(e)[0] ? " " : "",
                out_shape(e, shp));
        if (e->grad_norm >= 0)
            fprintf(f, "   |grad| = %.6g", e->grad_norm);
        if (e->grad_zeros > 0)
            fprintf(f, "   zeros %lld/%lld", (long long)e->grad_zeros,
                    (long long)e->grad_numel);
        if (e->file)
            fprintf(f, "   at %s:%d", e->file, e->line);
        fputc('\n', f);
    }
    tg__tape_unlock();
    numbering_free(&nb);
}

/* A name inside a DOT string: quotes and backslashes escaped, control
 * characters as spaces, so no name can end the string. */
static void dot_name(FILE *f, const char *name)
{
    for (; *name; name++) {
        unsigned char c = (unsigned char)*name;
        if (c == '"' || c == '\\')
            fputc('\\', f);
        fputc(c < 0x20 || c == 0x7f ? ' ' : c, f);
    }
}

/* A summary of values as label lines: a bool's trues, one element's value,
 * the value all the finite ones share, or their min, mean and max, and the -inf (the mask's fill)
 * and other non-finite elements counted. */
static void dot_values(FILE *f, const tg__vstats *v)
{
    if (v->numel <= 0)
        return;
    if (v->is_bool) {
        fprintf(f, "\\ntrue %lld/%lld", (long long)v->n_true,
                (long long)v->numel);
        return;
    }
    if (v->numel == 1 && !(v->neg_inf + v->nonfinite))
        fprintf(f, "\\nvalue %.3g", v->mean);
    else if (v->min == v->max && !(v->neg_inf + v->nonfinite))
        fprintf(f, "\\nall %.3g", v->min);
    else if (v->neg_inf + v->nonfinite < v->numel)
        fprintf(f, "\\nmin %.3g mean %.3g max %.3g", v->min, v->mean, v->max);
    if (v->neg_inf && v->numel > 1)
        fprintf(f, "\\n-inf %lld/%lld", (long long)v->neg_inf,
                (long long)v->numel);
    else if (v->neg_inf)
        fputs("\\nvalue -inf", f);
    if (v->nonfinite)
        fprintf(f, "\\nnot finite %lld/%lld", (long long)v->nonfinite,
                (long long)v->numel);
}

/* A gradient's label lines, as an entry's: "|grad| G", and "zeros Z/N"
 * when some elements are exactly 0. */
static void dot_grad(FILE *f, double norm, int64_t zeros, int64_t numel)
{
    fprintf(f, "\\n|grad| %.3g", norm);
    if (zeros > 0)
        fprintf(f, "\\nzeros %lld/%lld", (long long)zeros, (long long)numel);
}

/* Leaf t (live: an unconsumed entry holds it) or its note from the last
 * walk: values, and its gradient (a constant says so). */
static void dot_leaf_stats(FILE *f, const tg_tensor *t, uint64_t tid)
{
    leaf_note live = {0};
    const leaf_note *l = NULL;
    if (t) {
        live.requires_grad = t->requires_grad;
        value_stats(t, &live.val);
        if (t->grad) {
            tg_node tmp = {0};
            record_grad_stats(&tmp, t->grad);
            live.has_grad = true;
            live.grad_norm = tmp.grad_norm;
            live.grad_zeros = tmp.grad_zeros;
            live.grad_numel = tmp.grad_numel;
        }
        l = &live;
    } else
        l = leaf_find(tid);
    if (!l)
        return;
    dot_values(f, &l->val);
    if (!l->requires_grad)
        fputs("\\nno grad (constant)", f);
    else if (l->has_grad)
        dot_grad(f, l->grad_norm, l->grad_zeros, l->grad_numel);
}

/* Input i of e, a leaf: declared where first used (drawn[] when given),
 * with its name, shape, values and gradient; then its edge. */
static void dot_leaf(FILE *f, const numbering *nb, const tg_node *e, int i,
                     size_t k, bool *drawn)
{
    char shp[TG_SHAPE_STR];
    size_t j = leaf_number(nb, e->in_tid[i]);
    if (!drawn || !drawn[j - 1]) {
        tg__shape_str(e->in_ndim[i], e->in_shape[i], shp);
        fprintf(f, "  t%zu [shape=ellipse, label=\"", j);
        dot_name(f, e->in_name[i]);
        fprintf(f, "%s%s", e->in_name[i][0] ? "\\n" : "", shp);
        dot_leaf_stats(f, e->consumed ? NULL : e->in[i], e->in_tid[i]);
        fputs("\"];\n", f);
    }
    if (drawn)
        drawn[j - 1] = true;
    fprintf(f, "  t%zu -> e%zu;\n", j, k);
}

/* e's mask (a bool tensor it saved, none of its inputs), drawn as an input
 * of its own: a dashed ellipse, its trues counted, and a dashed edge. */
static void dot_mask(FILE *f, const tg_node *e, size_t k)
{
    char shp[TG_SHAPE_STR];
    tg__vstats v = e->mask_val;
    for (int s = 0; !e->consumed && s < TG_NODE_MAX_SAVED; s++)
        if (e->saved[s] && e->saved[s]->id == e->mask_tid)
            value_stats(e->saved[s], &v);
    fprintf(f, "  m%zu [shape=ellipse, style=dashed, label=\"", k);
    dot_name(f, e->mask_name[0] ? e->mask_name : "mask");
    fprintf(f, "\\n%s", tg__shape_str(e->mask_ndim, e->mask_shape, shp));
    dot_values(f, &v);
    fputs("\\nno grad (constant)\"];\n", f);
    fprintf(f, "  m%zu -> e%zu [style=dashed, label=\"mask\"];\n", k, k);
}

/* Entry e (number k): its box (op, output name, shape, values, the
 * gradient that reached it, call site), then its inputs. */
static void dot_entry(FILE *f, const numbering *nb, const tg_node *e,
                      bool *drawn)
{
    size_t k = entry_number(nb, e->seq);
    char shp[TG_SHAPE_STR];
    fprintf(f, "  e%zu [shape=box, style=rounded, label=\"#%zu ", k, k);
    dot_name(f, e->op->name);
    fputs("\\n", f);
    dot_name(f, out_name(e));
    fprintf(f, "%s%s", out_name(e)[0] ? " " : "", out_shape(e, shp));
    tg__vstats v = e->val;
    if (e->out)
        value_stats(e->out, &v);
    dot_values(f, &v);
    if (e->grad_norm >= 0)
        dot_grad(f, e->grad_norm, e->grad_zeros, e->grad_numel);
    if (e->file) { /* a path may hold " or \\ too */
        fputs("\\n", f);
        dot_name(f, e->file);
        fprintf(f, ":%d", e->line);
    }
    fprintf(f, "\"];\n");
    for (int i = 0; i < e->n_in; i++) {
        if (!e->in_tid[i])
            continue;
        if (is_leaf_input(nb, e, i))
            dot_leaf(f, nb, e, i, k, drawn);
        else
            fprintf(f, "  e%zu -> e%zu [label=\"%s\"];\n",
                    entry_number(nb, e->in_seq[i]), k,
                    tg__shape_str(e->in_ndim[i], e->in_shape[i], shp));
    }
    if (e->mask_tid)
        dot_mask(f, e, k);
}

void tg_tape_dot(FILE *f)
{
    tg_node *head;
    numbering nb;
    if (!f || !numbered_pass(f, "// tape_dot: out of memory\ndigraph tape {}\n",
                             &head, &nb))
        return;
    fprintf(f, "digraph tape {\n  rankdir=BT;\n"
               "  node [fontname=\"Helvetica\", fontsize=10];\n");
    /* each leaf declared where it is first used */
    bool *drawn = tg__calloc(nb.n_leaves ? nb.n_leaves : 1, sizeof *drawn);
    for (tg_node *e = head; e; e = e->next)
        dot_entry(f, &nb, e, drawn);
    tg__tape_unlock();
    fprintf(f, "}\n");
    free(drawn);
    numbering_free(&nb);
}
