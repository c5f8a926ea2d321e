/* plot.c: repro's SVG plot, written by hand (no plotting library): every request's
 * latency against when it started, corrupted requests as red crosses, failed ones as
 * black squares on the top edge, p50 and p99 as dashed lines. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/repro/repro_priv.h"

/* the canvas and the plot area's margins, in pixels */
#define W 900
#define H 420
#define ML 70
#define MR 20
#define MT 40
#define MB 50

/* Text inside an element, with XML's special characters escaped. */
static void put_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        default: fputc(*s, f); break;
        }
    }
}

/* A round axis maximum at or above v (1, 2 or 5 times a power of ten). */
static double nice_max(double v)
{
    double p = 1;
    if (v <= 0)
        return 1;
    while (p * 10 <= v)
        p *= 10;
    while (p > v)
        p /= 10;
    return v <= p ? p : v <= 2 * p ? 2 * p : v <= 5 * p ? 5 * p : 10 * p;
}

typedef struct axes {
    double xmax_s, ymax_ms, pw, ph;
} axes;

static double px(const axes *a, double s)
{
    return ML + s / a->xmax_s * a->pw;
}

static double py(const axes *a, double ms)
{
    return MT + a->ph - ms / a->ymax_ms * a->ph;
}

static void draw_frame(FILE *f, const dsv4_repro *r, const axes *a)
{
    const dsv4_repro_opts *o = &r->opts;
    const dsv4_repro_summary *s = &r->sum;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%d\" y=\"22\" font-size=\"14\">dsv4ctl repro: %u sessions x %u turns, "
            "concurrency %u, seed %llu: %u corrupted, %u failed</text>\n",
            W, H, ML, o->sessions, o->turns, o->concurrency, (unsigned long long)o->seed,
            s->sessions_corrupted, s->sessions_failed);
    for (int i = 0; i <= 5; i++) {
        double yv = a->ymax_ms * i / 5, xv = a->xmax_s * i / 5;
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n"
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                ML, W - MR, py(a, yv), py(a, yv), ML - 6, py(a, yv) + 4, yv, px(a, xv), H - MB + 16,
                xv);
    }
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
            "stroke=\"black\"/>\n"
            "<text x=\"%.0f\" y=\"%d\" text-anchor=\"middle\">request start (s)</text>\n"
            "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" "
            "text-anchor=\"middle\">latency (ms)</text>\n",
            ML, MT, a->pw, a->ph, ML + a->pw / 2, H - 12, MT + a->ph / 2, MT + a->ph / 2);
    const char *names[] = {"p50", "p99"};
    double q[] = {s->latency_p50_ms, s->latency_p99_ms};
    for (int i = 0; i < 2; i++)
        if (q[i] >= 0)
            fprintf(f,
                    "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
                    "stroke-dasharray=\"4 3\"/><text x=\"%d\" y=\"%.1f\" fill=\"#888\" "
                    "text-anchor=\"end\">%s %.0f ms</text>\n",
                    ML, W - MR, py(a, q[i]), py(a, q[i]), W - MR - 4, py(a, q[i]) - 3, names[i],
                    q[i]);
    fprintf(f,
            "<circle cx=\"%d\" cy=\"18\" r=\"3\" fill=\"#3465a4\"/><text x=\"%d\" y=\"22\">"
            "matches</text>\n<path d=\"M%d 14l8 8m0 -8l-8 8\" stroke=\"#cc0000\" "
            "stroke-width=\"2\"/><text x=\"%d\" y=\"22\">corrupted</text>\n<rect x=\"%d\" "
            "y=\"15\" width=\"6\" height=\"6\"/><text x=\"%d\" y=\"22\">failed</text>\n",
            W - 260, W - 252, W - 180, W - 168, W - 90, W - 80);
}

static void draw_request(FILE *f, const axes *a, const dsv4_repro_turn *tr, unsigned s, unsigned t)
{
    double x = px(a, tr->start_ms / 1e3);
    if (tr->status == DSV4_TURN_OK && tr->diverged_at < 0) {
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#3465a4\"/>\n", x,
                py(a, tr->latency_ms));
    } else if (tr->status == DSV4_TURN_OK) {
        fprintf(f,
                "<path d=\"M%.1f %.1fl8 8m0 -8l-8 8\" stroke=\"#cc0000\" stroke-width=\"2\">"
                "<title>session %u turn %u: differs at token %ld</title></path>\n",
                x - 4, py(a, tr->latency_ms) - 4, s, t, tr->diverged_at);
    } else if (tr->status != DSV4_TURN_NOT_RUN) {
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%d\" width=\"6\" height=\"6\" fill=\"black\">"
                "<title>session %u turn %u: ",
                x - 3, MT - 3, s, t);
        put_text(f, tr->error);
        fputs("</title></rect>\n", f);
    }
}

int dsv4_repro_write_svg(const dsv4_repro *r, const char *path, char *err, size_t errlen)
{
    const dsv4_repro_opts *o = &r->opts;
    FILE *f = fopen(path, "w");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "plot %s: cannot write (%s)", path, strerror(e));
        return -e;
    }
    axes a = {.pw = W - ML - MR, .ph = H - MT - MB};
    for (size_t i = 0; i < (size_t)o->sessions * o->turns; i++) {
        const dsv4_repro_turn *tr = &r->turns[i];
        if (tr->status == DSV4_TURN_NOT_RUN)
            continue;
        if (tr->start_ms / 1e3 > a.xmax_s)
            a.xmax_s = tr->start_ms / 1e3;
        if (tr->latency_ms > a.ymax_ms)
            a.ymax_ms = tr->latency_ms;
    }
    a.xmax_s = nice_max(a.xmax_s);
    a.ymax_ms = nice_max(a.ymax_ms);
    draw_frame(f, r, &a);
    for (unsigned s = 0; s < o->sessions; s++)
        for (unsigned t = 0; t < o->turns; t++)
            draw_request(f, &a, &r->turns[(size_t)s * o->turns + t], s, t);
    fputs("</svg>\n", f);
    if (fclose(f) != 0) {
        int e = errno;
        snprintf(err, errlen, "plot %s: cannot write (%s)", path, strerror(e));
        return -e;
    }
    return 0;
}
