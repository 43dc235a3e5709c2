/* The report's tape section: tg_tape_dot's graph, dressed for the page and
 * drawn by Graphviz as inline SVG.
 *
 * tg_tape_dot writes one node per entry ("e<k>", a box labelled "#k op",
 * the output's name and shape, its values' min / mean / max, after a
 * backward "|grad| G" and, when some of the gradient's elements are exactly
 * zero, "zeros Z/N", then the call site), one per leaf ("t<j>", an ellipse:
 * name, shape, values, and the gradient the leaf received or "no grad"),
 * one per mask an op reads ("m<k>", a dashed ellipse), and an edge per
 * input. Here each node gets its label as a tooltip (so the SVG's <title>
 * and the browser's tooltip hold the name, op, shape, values, call site and
 * gradient), and the |grad| colours it: every edge leaving a node is drawn
 * with penwidth 1 + 4 sqrt(G / Gmax) and from grey to red as the gradient
 * G flowing back along it grows, and a node whose gradient holds exact
 * zeros gets a double blue border and a line below the picture. A legend
 * says so under the picture.
 *
 * plot/report.c wraps the figure in its section; the figure's own text goes
 * through plot/report_text.c, and dot is found and run by
 * plot/report_tools.c. */
#include "plot/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tnode {
    char id[24];            /* e3, t1 */
    char *label;            /* as in the DOT file: escaped */
    double g;               /* |grad|, or -1 */
    long long zeros, numel; /* zeros < 0: not recorded */
} tnode;

/* The DOT string starting after an opening quote, up to the closing one. */
static char *dot_string(const char *p, const char **end)
{
    const char *q = p;
    while (*q && *q != '"') {
        if (*q == '\\' && q[1])
            q++;
        q++;
    }
    *end = q;
    char *s = tg__malloc((size_t)(q - p) + 1);
    if (s) {
        memcpy(s, p, (size_t)(q - p));
        s[q - p] = '\0';
    }
    return s;
}

/* A DOT label as plain text: \n the line separator nl, \" and \\
 * themselves; HTML-escaped when html. */
static void label_text(sbuf *b, const char *label, bool html, const char *nl)
{
    for (const char *p = label; *p; p++) {
        char c = *p;
        if (c == '\\' && p[1]) {
            p++;
            if (*p == 'n' || *p == 'l' || *p == 'r') {
                tg__sb_puts(b, nl);
                continue;
            }
            c = *p;
        }
        char s[2] = {c, 0};
        if (html)
            tg__put_html(b, s);
        else
            tg__sb_putn(b, s, 1);
    }
}

/* The start of the label's next line after p (a DOT label's lines are
 * separated by \n, \l or \r; \" and \\ are characters), or NULL at its
 * end. */
static const char *next_line(const char *p)
{
    for (; *p; p++)
        if (*p == '\\' && p[1]) {
            p++;
            if (*p == 'n' || *p == 'l' || *p == 'r')
                return p + 1;
        }
    return NULL;
}

/* A node's gradient statistics from its label's lines: tg_tape_dot writes
 * an entry as "#k op", the output's name and shape, then its values, and
 * after a backward "|grad| G" and (when some of the gradient's elements
 * are exactly zero) "zeros Z/N", then the call site; a leaf as its name and
 * shape, its values and the same gradient lines (or "no grad" for a
 * constant). The name is escaped (a line break in it cannot end its line),
 * so only lines after the name's are read: a name holding "|grad| 99"
 * cannot supply the numbers. */
static void parse_stats(tnode *n)
{
    n->g = -1;
    n->zeros = -1;
    const char *l = next_line(n->label); /* after an entry's first line */
    if (n->id[0] == 'e' && l)
        l = next_line(l); /* and after its name's */
    for (; l; l = next_line(l))
        if (!strncmp(l, "|grad| ", 7))
            n->g = strtod(l + 7, NULL);
        else if (!strncmp(l, "zeros ", 6) &&
                 sscanf(l, "zeros %lld/%lld", &n->zeros, &n->numel) != 2)
            n->zeros = -1;
}

static const tnode *find(const tnode *nodes, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(nodes[i].id, id))
            return &nodes[i];
    return NULL;
}

/* grey (no gradient) to red (the largest) */
static void grad_colour(sbuf *b, double g, double gmax)
{
    if (!(g >= 0) || !(gmax > 0)) {
        tg__sb_puts(b, "#999999");
        return;
    }
    double f = sqrt(g / gmax);
    int r = (int)(153 + f * (214 - 153)), gg = (int)(153 - f * (153 - 39)),
        bb = (int)(153 - f * (153 - 40));
    tg__sb_printf(b, "#%02x%02x%02x", r, gg, bb);
}

/* The graph's nodes as the DOT text declares them (id, label, statistics)
 * into *nodes_out, their count into *n_out; false when out of memory (the
 * nodes read so far are kept, for the caller to free). */
static bool read_nodes(const char *dot, tnode **nodes_out, int *n_out)
{
    int n = 0, cap = 0;
    tnode *nodes = NULL;
    bool oom = false;
    for (const char *line = dot; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        /* a line is a node or an edge by how it starts: "e3 [" or
         * "t1 [", "t1 -> e3" (a label holding "->" changes nothing) */
        char id[24], tok[3];
        const char *lab = strstr(line, "label=\"");
        if (sscanf(line, " %23[etm0-9] %2s", id, tok) == 2 && tok[0] == '[' &&
            lab && (size_t)(lab - line) < len) {
            if (n == cap) {
                cap = cap ? cap * 2 : 32;
                tnode *m = tg__realloc(nodes, (size_t)cap * sizeof *m);
                if (!m) {
                    oom = true;
                    break;
                }
                nodes = m;
            }
            const char *end;
            tnode *t = &nodes[n];
            snprintf(t->id, sizeof t->id, "%s", id);
            t->label = dot_string(lab + 7, &end);
            if (!t->label) {
                oom = true;
                break;
            }
            parse_stats(t);
            n++;
        }
        line += len + (eol != NULL);
    }
    *nodes_out = nodes;
    *n_out = n;
    return !oom;
}

/* The edge line (len bytes) from -> to, dressed: its width and colour by
 * the |grad| of the entry it leaves, its label kept. */
static void dress_edge(sbuf *b, const char *line, size_t len, const char *from,
                       const char *to, const tnode *nodes, int n, double gmax)
{
    tg__sb_printf(b, "  %s -> %s [", from, to);
    const tnode *src = find(nodes, n, from);
    double g = src ? src->g : -1;
    tg__sb_printf(b, "penwidth=%.2f, color=\"",
                  g >= 0 && gmax > 0 ? 1 + 4 * sqrt(g / gmax) : 1.0);
    grad_colour(b, g, gmax);
    tg__sb_puts(b, from[0] == 'm' ? "\", style=dashed" : "\"");
    const char *lab = strstr(line, "label=\"");
    if (lab && (size_t)(lab - line) < len) {
        const char *end;
        char *s = dot_string(lab + 7, &end);
        if (s)
            tg__sb_printf(b, ", label=\"%s\"", s);
        free(s);
    }
    tg__sb_puts(b, "];\n");
}

/* The node t, dressed: an entry's rounded box or a leaf's ellipse, its
 * border coloured by |grad| (double and blue when its gradient holds exact
 * zeros), its label as the tooltip too. */
static void dress_node(sbuf *b, const tnode *t, double gmax)
{
    bool entry = t->id[0] == 'e', mask = t->id[0] == 'm';
    tg__sb_printf(b, "  %s [shape=%s, style=\"%sfilled\", ", t->id,
                  entry ? "box" : "ellipse",
                  entry  ? "rounded,"
                  : mask ? "dashed,"
                         : "");
    tg__sb_printf(b, "fillcolor=\"%s\", color=\"",
                  entry ? "#f4f6fb" : "#fdf6e3");
    if (t->zeros > 0)
        tg__sb_puts(b, "#1f5fbf\", peripheries=2");
    else {
        grad_colour(b, t->g, gmax);
        tg__sb_puts(b, "\"");
    }
    tg__sb_printf(b, ", tooltip=\"%s\", label=\"%s\"];\n", t->label, t->label);
}

/* Rewrites the DOT text: tooltips, widths and colours by |grad|. The nodes
 * go to *nodes_out (the caller frees them and their labels, also when the
 * text is NULL: out of memory). */
static char *dress(const char *dot, tnode **nodes_out, int *n_out)
{
    tnode *nodes;
    int n;
    bool oom = !read_nodes(dot, &nodes, &n);
    double gmax = 0;
    for (int i = 0; i < n; i++)
        gmax = fmax(gmax, nodes[i].g);
    sbuf b = {0};
    for (const char *line = dot; *line && !oom;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char id[24], from[24], to[24];
        const tnode *t;
        if (sscanf(line, " %23[etm0-9] -> %23[etm0-9]", from, to) == 2)
            dress_edge(&b, line, len, from, to, nodes, n, gmax);
        else if (sscanf(line, " %23[etm0-9] [", id) == 1 &&
                 (t = find(nodes, n, id)))
            dress_node(&b, t, gmax);
        else {
            tg__sb_putn(&b, line, len);
            tg__sb_putn(&b, "\n", 1);
            if (!strncmp(line, "  node [", 8))
                tg__sb_puts(&b, "  edge [fontname=\"Helvetica\", "
                                "fontsize=9];\n");
        }
        line += len + (eol != NULL);
    }
    if (oom)
        b.oom = true;
    *nodes_out = nodes;
    *n_out = n;
    return tg__sb_detach(&b);
}

/* The SVG from <svg on, each node's <title> (its DOT id) replaced by its
 * label's text. */
static void put_svg(sbuf *sec, const char *svg, const tnode *nodes, int n)
{
    const char *p = strstr(svg, "<svg");
    if (!p)
        return;
    /* inline SVG needs no namespace declarations: drop them, so the page
     * names no URL at all */
    const char *ns = strstr(p, " xmlns=");
    const char *close = strchr(p, '>');
    if (ns && close && ns < close) {
        tg__sb_putn(sec, p, (size_t)(ns - p));
        tg__sb_putn(sec, close, 1);
        p = close + 1;
    }
    for (;;) {
        const char *t = strstr(p, "<title>");
        if (!t) {
            tg__sb_puts(sec, p);
            return;
        }
        const char *body = t + 7, *end = strstr(body, "</title>");
        if (!end) {
            tg__sb_puts(sec, p);
            return;
        }
        tg__sb_putn(sec, p, (size_t)(body - p));
        char id[24];
        snprintf(id, sizeof id, "%.*s",
                 (int)(end - body < 23 ? end - body : 23), body);
        const tnode *node = end - body < 23 ? find(nodes, n, id) : NULL;
        if (node)
            label_text(sec, node->label, true, "\n");
        else
            tg__sb_putn(sec, body, (size_t)(end - body));
        p = end;
    }
}

/* The tape as tg_tape_dot writes it; NULL (error set) when out of
 * memory. */
static char *tape_dot(void)
{
    char *dot = NULL;
    size_t dot_len = 0;
    FILE *mem = open_memstream(&dot, &dot_len);
    if (!mem) {
        tg__error("report_tape: out of memory");
        return NULL;
    }
    tg_tape_dot(mem);
    if (fclose(mem) != 0 || !dot) {
        free(dot);
        tg__error("report_tape: out of memory");
        return NULL;
    }
    return dot;
}

/* The dressed graph drawn by dot as SVG (the caller frees it); NULL with
 * why set when dot is missing or fails. */
static char *draw_svg(const char *dressed, char *why, size_t cap)
{
    rtool dot_tool;
    tg__report_dot(&dot_tool);
    char dir[4096];
    char *svg = NULL;
    if (!dot_tool.usable)
        snprintf(why, cap, "%s", dot_tool.why);
    else if (!tg__report_tmpdir(dir, sizeof dir))
        snprintf(why, cap, "no temporary directory for dot: %s",
                 strerror(errno));
    else {
        char in[4200], out[4200], last[256];
        snprintf(in, sizeof in, "%s/tape.dot", dir);
        snprintf(out, sizeof out, "%s/tape.svg", dir);
        FILE *f = fopen(in, "w");
        if (!f || fputs(dressed, f) < 0 || fclose(f) != 0)
            snprintf(why, cap, "cannot write the graph for dot");
        else {
            char *const argv[] = {"dot", "-Tsvg", "-o", out, in, NULL};
            if (!tg__report_run(dot_tool.path, argv, last, sizeof last))
                snprintf(why, cap, "dot failed: %.200s", last);
            else if (!(svg = tg__report_slurp(out, NULL)))
                snprintf(why, cap, "dot wrote no picture");
        }
        tg__report_rmdir(dir);
    }
    return svg;
}

/* The list under the picture of the entries whose gradient holds exact
 * zeros (nothing when none does). */
static void zeros_list(sbuf *sec, const tnode *nodes, int n)
{
    bool any = false;
    for (int i = 0; i < n; i++)
        if (nodes[i].zeros > 0) {
            tg__sb_puts(sec, any ? ""
                                 : "<p class=\"tg-note\">Gradients "
                                   "holding exact zeros (where something "
                                   "cut the path: a mask, a row the loss "
                                   "never reads, a softmax row with a "
                                   "single choice, an input that is "
                                   "0):</p>\n"
                                   "<ul class=\"tg-zeros\">\n");
            any = true;
            tg__sb_puts(sec, "<li>");
            label_text(sec, nodes[i].label, true, ", ");
            tg__sb_puts(sec, "</li>\n");
        }
    if (any)
        tg__sb_puts(sec, "</ul>\n");
}

/* What the picture's shapes, colours and widths mean. */
static void legend(sbuf *sec)
{
    tg__sb_puts(
        sec, "<dl class=\"tg-legend tg-tape-legend\">\n"
             "<dt>box</dt><dd>an op on the tape: its number and name, the "
             "tensor it made (name, shape, min / mean / max of its values) and "
             "the gradient that reached it in backward (|grad|, its L2 "
             "norm)</dd>\n"
             "<dt>ellipse</dt><dd>a leaf (weights, inputs): its values and, "
             "after backward, the gradient it received; \"no grad\" marks a "
             "constant</dd>\n"
             "<dt>dashed ellipse</dt><dd>a mask the op reads (true = "
             "masked)</dd>\n"
             "<dt>edge</dt><dd>a tensor flowing up to the op that reads it; "
             "its width and colour grow with the |grad| flowing back along it "
             "(grey: none, red: the largest)</dd>\n"
             "<dt>double blue border</dt><dd>the node's gradient holds exact "
             "zeros (\"zeros Z/N\")</dd>\n"
             "</dl>\n");
}

/* The figure of a tape with entries: the picture (or why it is missing),
 * its legend, the nodes with exact zeros, the dressed DOT text itself. */
static void tape_figure(sbuf *sec, const char *dressed, const tnode *nodes,
                        int n)
{
    char why[512] = "";
    char *svg = draw_svg(dressed, why, sizeof why);
    if (svg) {
        tg__sb_puts(sec, "<div class=\"tg-tape\">\n");
        put_svg(sec, svg, nodes, n);
        tg__sb_puts(sec, "</div>\n");
        free(svg);
    } else
        tg__report_missing(sec, why);
    legend(sec);
    zeros_list(sec, nodes, n);
    tg__sb_puts(sec, "<details><summary>The graph (DOT)</summary><pre "
                     "class=\"tg-pre\">");
    tg__put_html(sec, dressed);
    tg__sb_puts(sec, "</pre></details>\n");
}

/* The section's JSON fields: the number of entries, and each node's id,
 * text, |grad| and zeros. */
static void tape_json(sbuf *data, const tnode *nodes, int n, int entries)
{
    tg__sb_printf(data, "\"entries\":%d,\"nodes\":[", entries);
    for (int i = 0; i < n; i++) {
        tg__sb_puts(data, i ? ",{\"id\":" : "{\"id\":");
        tg__put_json(data, nodes[i].id);
        tg__sb_puts(data, ",\"text\":");
        sbuf t = {0};
        label_text(&t, nodes[i].label, false, "\n");
        char *text = tg__sb_detach(&t);
        tg__put_json(data, text ? text : "");
        free(text);
        if (nodes[i].g >= 0)
            tg__sb_printf(data, ",\"grad\":%.6g", nodes[i].g);
        if (nodes[i].zeros >= 0)
            tg__sb_printf(data, ",\"zeros\":%lld,\"numel\":%lld",
                          nodes[i].zeros, nodes[i].numel);
        tg__sb_puts(data, "}");
    }
    tg__sb_puts(data, "]");
}

bool tg__report_tape_body(sbuf *sec, sbuf *data)
{
    char *dot = tape_dot();
    if (!dot)
        return false;
    tnode *nodes = NULL;
    int n = 0;
    char *dressed = dress(dot, &nodes, &n);
    free(dot);
    bool ok = dressed != NULL;
    int entries = 0;
    for (int i = 0; i < n; i++)
        entries += nodes[i].id[0] == 'e';
    if (ok && entries == 0)
        tg__sb_puts(sec, "<p class=\"tg-note\">The tape is empty.</p>\n");
    else if (ok)
        tape_figure(sec, dressed, nodes, n);
    tape_json(data, nodes, n, entries);
    for (int i = 0; i < n; i++)
        free(nodes[i].label);
    free(nodes);
    free(dressed);
    if (!ok)
        tg__error("report_tape: out of memory");
    return ok;
}
