/* Text for the page: HTML-escaped text, JSON strings and numbers, and the
 * line that says why a figure is not drawn. The floor under every other
 * file of the report (plot/report.c, plot/report_tape.c, the figures'
 * files): it calls none of them. */
#include "plot/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tg__put_html(sbuf *b, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': tg__sb_puts(b, "&amp;"); break;
        case '<': tg__sb_puts(b, "&lt;"); break;
        case '>': tg__sb_puts(b, "&gt;"); break;
        case '"': tg__sb_puts(b, "&quot;"); break;
        case '\'': tg__sb_puts(b, "&#39;"); break;
        default: tg__sb_putn(b, s, 1);
        }
    }
}

void tg__put_json(sbuf *b, const char *s)
{
    if (!s) {
        tg__sb_puts(b, "null");
        return;
    }
    tg__sb_putn(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            tg__sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f)
            tg__sb_printf(b, "\\u%04x", c);
        else
            tg__sb_putn(b, (const char *)&c, 1);
    }
    tg__sb_putn(b, "\"", 1);
}

void tg__put_num(sbuf *b, double v, bool single)
{
    if (isnan(v)) {
        tg__sb_puts(b, "\"nan\"");
        return;
    }
    if (isinf(v)) {
        tg__sb_puts(b, v > 0 ? "\"inf\"" : "\"-inf\"");
        return;
    }
    char text[40];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, v);
        double back = strtod(text, NULL);
        if (single ? (float)back == (float)v : back == v)
            break;
    }
    /* JavaScript's exponent: "1e-7", not C's "1e-07" (JSON reads both) */
    char *e = strchr(text, 'e');
    if (e) {
        char *d = e + 2; /* past the sign */
        while (*d == '0' && d[1])
            memmove(d, d + 1, strlen(d));
    }
    tg__sb_puts(b, text);
}

void tg__report_missing(sbuf *b, const char *why)
{
    tg__sb_puts(b, "<p class=\"tg-missing\">Not drawn: ");
    tg__put_html(b, why);
    tg__sb_puts(b, ". The data stays in the page.</p>\n");
}

/* labels[0..n) as a JSON array of strings (a NULL label as ""), or null. */
void tg__put_json_labels(sbuf *b, const char *const *labels, int64_t n)
{
    if (!labels) {
        tg__sb_puts(b, "null");
        return;
    }
    tg__sb_putn(b, "[", 1);
    for (int64_t i = 0; i < n; i++) {
        if (i)
            tg__sb_putn(b, ",", 1);
        tg__put_json(b, labels[i] ? labels[i] : "");
    }
    tg__sb_putn(b, "]", 1);
}
