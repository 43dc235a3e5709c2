/* options.h: the examples' command lines, read from a table.
 *
 * An example lists its options once, as a table of opt entries: the name,
 * what the option takes (its kind), the member of the program's options
 * struct it sets (offsetof), the range a number must lie in, and its lines
 * of the usage text. opt_parse reads argv against the table into that
 * struct; opt_help prints the table's lines of the usage, each with the
 * option's default in place of its conversion.
 *
 *     static const opt table[] = {
 *         {"--steps", OPT_INT, offsetof(options, steps), .lo = 1, .hi = 1e7,
 *          .help = "  --steps N   Adam steps (default %d)\n"},
 *         ...
 *     };
 *
 * (name, kind and member in that order, the rest by its name: an entry
 * without lines of its own says .help = NULL.)
 *
 * The examples had command lines of their own before they shared this
 * parser, and other programs and tests are written against their exact
 * messages: an opt_parser keeps each program's wording (missing, unknown,
 * invalid) and its order of checks (value_first, whole_digits).
 *
 * Header-only (static inline), like make_dir.h. */
#ifndef TAPEGRAD_EXAMPLES_OPTIONS_H
#define TAPEGRAD_EXAMPLES_OPTIONS_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum opt_kind {
    OPT_TEXT,   /* no option: lines of the usage only (a section title) */
    OPT_ARG,    /* no option: a bare argument, not --..., a const char * */
    OPT_TRUE,   /* a flag: its bool becomes true */
    OPT_FALSE,  /* a flag: its bool becomes false */
    OPT_SET,    /* a flag: its int becomes .set */
    OPT_CLEAR,  /* a flag: its const char * becomes NULL */
    OPT_INT,    /* a whole number in [lo, hi], an int */
    OPT_U32,    /* a whole number in [lo, hi], a uint32_t (a seed) */
    OPT_REAL,   /* a finite number between lo and hi, a double */
    OPT_STRING, /* any text ("" refused with .nonempty), a const char * */
    OPT_CHOICE, /* words[i], one of two or three: its int becomes values[i] */
} opt_kind;

typedef struct opt {
    const char *name;      /* "--steps"; NULL for OPT_TEXT and OPT_ARG */
    opt_kind kind;         /* what it takes, and the member's type */
    size_t field;          /* offsetof the member it sets */
    double lo, hi;         /* OPT_INT, OPT_U32, OPT_REAL: the range */
    bool lo_open, hi_open; /* OPT_REAL: lo itself refused, hi itself */
    bool nonempty;         /* OPT_STRING: "" refused */
    int set;               /* OPT_SET: the value stored */
    const char *words[3];  /* OPT_CHOICE: the words (a third, or NULL) */
    int values[3];         /* OPT_CHOICE: what each word stores */
    /* its lines of the usage, a printf format of the default (%d, %u, %g,
     * %s; %% for %), or NULL when another entry's lines say it */
    const char *help;
} opt;

/* An opt_parser's table and its length, from the table's array. */
#define OPT_TABLE(t) .table = (t), .n = sizeof(t) / sizeof *(t)

typedef struct opt_parser {
    const char *prog; /* "tiny_gpt": every message opens with it */
    const opt *table;
    size_t n;               /* entries in the table */
    void (*usage)(FILE *f); /* the whole usage text, for --help and -h */
    /* The program's complaints, each a format of the option's name (%s) */
    const char *missing;   /* an option given no value */
    const char *unknown;   /* a name not in the table */
    const char *invalid;   /* a value refused; NULL: say what it wants */
    bool usage_on_unknown; /* the usage on stderr after unknown */
    /* An unknown --name last on the line is told it needs a value: every
     * --name not a flag is taken to want one before it is looked up. */
    bool value_first;
    /* Whole numbers in digits alone (strtol: "1e3" refused); else any
     * number without a fraction, as strtod reads it ("1e3" is 1000). */
    bool whole_digits;
} opt_parser;

/* Fills buf (cap bytes, the text cut to fit) with text as printf would
 * with one string argument arg: every conversion (a % and one letter)
 * becomes arg, %% becomes %. A table's text is no literal that the
 * compiler can check against its arguments (-Wformat=2), so it is filled
 * by hand. */
static inline const char *opt_fill(char *buf, size_t cap, const char *text,
                                   const char *arg)
{
    size_t k = 0;
    for (const char *c = text; *c && k + 1 < cap; c++) {
        if (*c != '%' || !c[1]) {
            buf[k++] = *c;
            continue;
        }
        c++;
        if (*c == '%')
            buf[k++] = '%';
        else
            k += (size_t)snprintf(buf + k, cap - k, "%s", arg ? arg : "");
    }
    buf[k < cap ? k : cap - 1] = '\0';
    return buf;
}

/* text filled with arg (opt_fill) on f. */
static inline void opt_put(FILE *f, const char *text, const char *arg)
{
    char buf[2048];
    fputs(opt_fill(buf, sizeof buf, text, arg), f);
}

/* The last complaint (opt_complain), without "prog: " and the newline: a
 * program of several processes sends it to the others (examples/tiny_gpt,
 * under mpirun). */
static char opt_said[512];

/* Says "prog: <fmt filled>" on stderr as one line written at once, so
 * that processes sharing stderr (under mpirun) never cut into each other's
 * lines, and keeps it in opt_said. */
static inline void opt_vcomplain(const char *prog, const char *fmt, va_list ap)
{
    vsnprintf(opt_said, sizeof opt_said, fmt, ap);
    char line[sizeof opt_said + 64];
    snprintf(line, sizeof line, "%s: %s\n", prog, opt_said);
    fputs(line, stderr);
}

__attribute__((format(printf, 2, 3))) static inline void
opt_complain(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    opt_vcomplain(prog, fmt, ap);
    va_end(ap);
}

/* "prog: " and format filled with name (opt_put), a line on stderr. */
static inline void opt_say(const opt_parser *p, const char *format,
                           const char *name)
{
    char text[sizeof opt_said];
    opt_complain(p->prog, "%s", opt_fill(text, sizeof text, format, name));
}

/* The member e sets in values. */
static inline void *opt_member(const opt *e, void *values)
{
    return (char *)values + e->field;
}

/* The member e sets in values as text, for the usage: a number printed into
 * buf (cap bytes), a string itself; "" for the rest. */
static inline const char *opt_text_of(const opt *e, const void *values,
                                      char *buf, size_t cap)
{
    const void *m = (const char *)values + e->field;
    const char *const *s = m;
    buf[0] = '\0';
    if (e->kind == OPT_INT)
        snprintf(buf, cap, "%d", *(const int *)m);
    else if (e->kind == OPT_U32)
        snprintf(buf, cap, "%u", (unsigned)*(const uint32_t *)m);
    else if (e->kind == OPT_REAL)
        snprintf(buf, cap, "%g", *(const double *)m);
    else if ((e->kind == OPT_STRING || e->kind == OPT_ARG) && *s)
        return *s;
    return buf;
}

/* The table's lines of the usage, in its order, each with its default
 * from defaults (the program's options struct as it starts). */
static inline void opt_help(const opt_parser *p, const void *defaults, FILE *f)
{
    char buf[64];
    for (size_t i = 0; i < p->n; i++)
        if (p->table[i].help)
            opt_put(f, p->table[i].help,
                    opt_text_of(&p->table[i], defaults, buf, sizeof buf));
}

/* The entry of arg: by name for a --name, else the OPT_ARG entry; NULL
 * when the table has none. */
static inline const opt *opt_find(const opt_parser *p, const char *arg)
{
    bool bare = strncmp(arg, "--", 2) != 0;
    for (size_t i = 0; i < p->n; i++) {
        const opt *e = &p->table[i];
        if (bare ? e->kind == OPT_ARG : e->name && !strcmp(e->name, arg))
            return e;
    }
    return NULL;
}

/* True when the table says name was on the command line (seen, as filled
 * by opt_parse). */
static inline bool opt_given(const opt_parser *p, const bool *seen,
                             const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->table[i].name && !strcmp(p->table[i].name, name) && seen[i])
            return true;
    return false;
}

/* s as a whole number in [e->lo, e->hi] into *v (see whole_digits). */
static inline bool opt_whole(const opt_parser *p, const opt *e, const char *s,
                             long long *v)
{
    char *end;
    if (p->whole_digits) {
        errno = 0;
        *v = strtoll(s, &end, 10);
        return !errno && end != s && !*end && *v >= e->lo && *v <= e->hi;
    }
    double x = *s ? strtod(s, &end) : NAN;
    *v = 0;
    if (isnan(x) || *end || x < e->lo || x > e->hi || x != floor(x))
        return false;
    *v = (long long)x;
    return true;
}

/* s as a finite number in e's range into *v. */
static inline bool opt_real(const opt *e, const char *s, double *v)
{
    char *end;
    *v = strtod(s, &end);
    return end != s && !*end && isfinite(*v) &&
           (e->lo_open ? *v > e->lo : *v >= e->lo) &&
           (e->hi_open ? *v < e->hi : *v <= e->hi);
}

/* Stores the value s of option e into values. False when s will not do. */
static inline bool opt_store(const opt_parser *p, const opt *e, const char *s,
                             void *values)
{
    void *m = opt_member(e, values);
    long long n;
    bool ok = true;
    if (e->kind == OPT_INT || e->kind == OPT_U32) {
        ok = opt_whole(p, e, s, &n);
        if (ok && e->kind == OPT_INT)
            *(int *)m = (int)n;
        else if (ok)
            *(uint32_t *)m = (uint32_t)n;
    } else if (e->kind == OPT_REAL) {
        ok = opt_real(e, s, m);
    } else if (e->kind == OPT_STRING) {
        ok = !e->nonempty || *s;
        *(const char **)m = s;
    } else if (e->kind == OPT_CHOICE) {
        int k = 0;
        while (k < 3 && e->words[k] && strcmp(s, e->words[k]))
            k++;
        ok = k < 3 && e->words[k];
        if (ok)
            *(int *)m = e->values[k];
    }
    return ok;
}

/* Sets the member of a flag (OPT_TRUE, _FALSE, _SET, _CLEAR). False when e
 * takes a value. */
static inline bool opt_flag(const opt *e, void *values)
{
    void *m = opt_member(e, values);
    if (e->kind == OPT_TRUE || e->kind == OPT_FALSE)
        *(bool *)m = e->kind == OPT_TRUE;
    else if (e->kind == OPT_SET)
        *(int *)m = e->set;
    else if (e->kind == OPT_CLEAR)
        *(const char **)m = NULL;
    else
        return false;
    return true;
}

/* Says what is wrong with the value s of e: the program's invalid, or what
 * e wants and what it got. */
static inline void opt_refuse(const opt_parser *p, const opt *e, const char *s)
{
    const char *name = e->name, *prog = p->prog;
    if (p->invalid)
        opt_say(p, p->invalid, name);
    else if (e->kind == OPT_INT || e->kind == OPT_U32)
        opt_complain(prog, "%s wants a whole number >= %ld, not '%s'", name,
                     (long)e->lo, s);
    else if (e->kind == OPT_REAL && e->hi == INFINITY)
        opt_complain(prog, "%s wants a number %s %g, not '%s'", name,
                     e->lo_open ? ">" : ">=", e->lo, s);
    else if (e->kind == OPT_REAL)
        opt_complain(prog, "%s wants a number in %c%g, %g%c, not '%s'", name,
                     e->lo_open ? '(' : '[', e->lo, e->hi,
                     e->hi_open ? ')' : ']', s);
    else if (e->kind == OPT_CHOICE && e->words[2])
        opt_complain(prog, "%s wants %s, %s or %s, not '%s'", name, e->words[0],
                     e->words[1], e->words[2], s);
    else if (e->kind == OPT_CHOICE)
        opt_complain(prog, "%s wants %s or %s, not '%s'", name, e->words[0],
                     e->words[1], s);
    else
        opt_complain(prog, "%s wants some text, not '%s'", name, s);
}

/* The unknown arg said (and the usage after it, if the program says so).
 * Returns 2. */
static inline int opt_unknown(const opt_parser *p, const char *arg)
{
    opt_say(p, p->unknown, arg);
    if (p->usage_on_unknown) {
        fputc('\n', stderr);
        p->usage(stderr);
    }
    return 2;
}

/* Reads argv into values, which hold the defaults. seen (NULL, or p->n
 * entries, false) gets which entries were on the command line. Returns 0
 * to run, 1 after --help or -h printed the usage (exit 0), 2 on a bad
 * command line, after saying what is wrong (exit 2). */
static inline int opt_parse(const opt_parser *p, int argc, char **argv,
                            void *values, bool *seen)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            p->usage(stdout);
            return 1;
        }
        const opt *e = opt_find(p, arg);
        if (e && seen)
            seen[e - p->table] = true;
        if (e && e->kind == OPT_ARG) {
            *(const char **)opt_member(e, values) = arg;
            continue;
        }
        if (e && opt_flag(e, values))
            continue;
        if (!e && !p->value_first)
            return opt_unknown(p, arg);
        if (i + 1 == argc) {
            opt_say(p, p->missing, arg);
            return 2;
        }
        const char *value = argv[++i];
        if (!e)
            return opt_unknown(p, arg);
        if (!opt_store(p, e, value, values)) {
            opt_refuse(p, e, value);
            return 2;
        }
    }
    return 0;
}

#endif /* TAPEGRAD_EXAMPLES_OPTIONS_H */
