/* html.c: the HTML report (see html.h). Charts are drawn here as SVG with
 * fixed sizes; every string from the report is escaped. */
#include "scenarios/html.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define CHART_W 640
#define CHART_H 260
#define PAD_L 64
#define PAD_B 40
#define PAD_T 28
#define PAD_R 16

static double jnum(const cJSON *o, const char *k, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static void esc(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* A chart frame: title, axes with min/max labels; returns nothing, the
 * caller maps data with chart_x/chart_y. */
typedef struct {
    double x0, x1, y0, y1;
} chart;

static double chart_x(const chart *c, double x) {
    return PAD_L + (c->x1 > c->x0 ? (x - c->x0) / (c->x1 - c->x0) : 0.5) * (CHART_W - PAD_L - PAD_R);
}

static double chart_y(const chart *c, double y) {
    return CHART_H - PAD_B - (c->y1 > c->y0 ? (y - c->y0) / (c->y1 - c->y0) : 0.5) * (CHART_H - PAD_B - PAD_T);
}

static void chart_open(FILE *f, const chart *c, const char *title, const char *xlabel, const char *yfmt) {
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n", CHART_W, CHART_H, CHART_W,
            CHART_H);
    fprintf(f, "<text x=\"%d\" y=\"18\" class=\"t\">", PAD_L);
    esc(f, title);
    fprintf(f, "</text>\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"ax\"/>", PAD_L, CHART_H - PAD_B,
            CHART_W - PAD_R, CHART_H - PAD_B);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"ax\"/>\n", PAD_L, PAD_T, PAD_L, CHART_H - PAD_B);
    for (int i = 0; i <= 4; i++) {
        double y = c->y0 + (c->y1 - c->y0) * i / 4, py = chart_y(c, y);
        char label[32];
        snprintf(label, sizeof label, yfmt, y);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>", PAD_L, py, CHART_W - PAD_R, py);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"yl\">%s</text>\n", PAD_L - 6, py + 4, label);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xl\">%.4g</text>", PAD_L, CHART_H - PAD_B + 16, c->x0);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xl\">%.4g</text>", CHART_W - PAD_R, CHART_H - PAD_B + 16, c->x1);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xl\">", (CHART_W + PAD_L) / 2, CHART_H - 6);
    esc(f, xlabel);
    fputs("</text>\n", f);
}

/* A polyline with dots through (xs[i], ys[i]). */
static void chart_line(FILE *f, const chart *c, const double *xs, const double *ys, int n, const char *cls) {
    fprintf(f, "<polyline class=\"%s\" points=\"", cls);
    for (int i = 0; i < n; i++) fprintf(f, "%.1f,%.1f ", chart_x(c, xs[i]), chart_y(c, ys[i]));
    fputs("\"/>\n", f);
    for (int i = 0; i < n; i++)
        fprintf(f, "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>", cls, chart_x(c, xs[i]), chart_y(c, ys[i]));
    fputs("\n", f);
}

static void accuracy_charts(FILE *f, const cJSON *rounds) {
    int n = cJSON_GetArraySize(rounds);
    if (n == 0) return;
    double *r = hfl_calloc((size_t)n, sizeof *r), *acc = hfl_calloc((size_t)n, sizeof *acc);
    double *t = hfl_calloc((size_t)n, sizeof *t), tsum = 0, lo = 1, hi = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(rounds, i);
        r[i] = jnum(o, "round", i + 1);
        acc[i] = jnum(o, "test_acc", 0);
        tsum += jnum(o, "wall_s", 0);
        t[i] = tsum;
        lo = acc[i] < lo ? acc[i] : lo;
        hi = acc[i] > hi ? acc[i] : hi;
    }
    lo = floor(lo * 10) / 10, hi = ceil(hi * 10) / 10;
    if (hi <= lo) hi = lo + 0.1;
    chart c = {r[0] < 1 ? r[0] : 1, r[n - 1] > 1 ? r[n - 1] : 2, lo, hi};
    chart_open(f, &c, "Test accuracy by round", "round", "%.3f");
    chart_line(f, &c, r, acc, n, "s1");
    fputs("</svg>\n", f);
    chart ct = {0, t[n - 1] > 0 ? t[n - 1] : 1, lo, hi};
    chart_open(f, &ct, "Test accuracy by wall time (seconds, rounds back to back)", "seconds", "%.3f");
    chart_line(f, &ct, t, acc, n, "s1");
    fputs("</svg>\n", f);
    /* simulated time, when the clients had device profiles (scenarios/profile.h) */
    double ssum = 0;
    int have_sim = 1;
    for (int i = 0; i < n; i++) {
        const cJSON *sim = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rounds, i), "simulated");
        have_sim &= cJSON_IsObject(sim);
        ssum += jnum(sim, "wall_s", 0);
        t[i] = ssum;
    }
    if (have_sim) {
        chart cs = {0, t[n - 1] > 0 ? t[n - 1] : 1, lo, hi};
        chart_open(f, &cs, "Test accuracy by simulated time (seconds, from the device profiles)", "seconds", "%.3f");
        chart_line(f, &cs, t, acc, n, "s1");
        fputs("</svg>\n", f);
    }
    free(r), free(acc), free(t);
}

static void bytes_chart(FILE *f, const cJSON *rounds) {
    int n = cJSON_GetArraySize(rounds);
    if (n == 0) return;
    double top = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(rounds, i);
        double up = jnum(o, "bytes_up", 0) / 1e6, down = jnum(o, "bytes_down", 0) / 1e6;
        top = up > top ? up : top;
        top = down > top ? down : top;
    }
    chart c = {1, n, 0, top > 0 ? top * 1.1 : 1}; /* x labels: first and last round; bars placed by index */
    chart_open(f, &c, "Megabytes per round: up (dark) and down (light)", "round", "%.2f");
    double w = (CHART_W - PAD_L - PAD_R) / (double)n;
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(rounds, i);
        double up = jnum(o, "bytes_up", 0) / 1e6, down = jnum(o, "bytes_down", 0) / 1e6, x = PAD_L + w * i;
        fprintf(f, "<rect class=\"s1\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", x + w * 0.1,
                chart_y(&c, up), w * 0.38, chart_y(&c, 0) - chart_y(&c, up));
        fprintf(f, "<rect class=\"s2\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n", x + w * 0.52,
                chart_y(&c, down), w * 0.38, chart_y(&c, 0) - chart_y(&c, down));
    }
    fputs("</svg>\n", f);
}

/* One row per client: its budget (outline), predicted (light) and measured
 * (dark) peak, on a log scale from 0.5 MiB (budgets run from MiBs to a
 * whole machine's memory). */
static double mem_x(double bytes, double top) {
    double lo = log10(0.5 * 1048576.0), v = bytes > 0.5 * 1048576.0 ? log10(bytes) : lo;
    return PAD_L + (v - lo) / (log10(top) - lo) * (CHART_W - PAD_L - PAD_R - 90);
}

static void memory_chart(FILE *f, const cJSON *clients) {
    int n = cJSON_GetArraySize(clients);
    if (n == 0) return;
    double top = 1048576.0;
    for (int i = 0; i < n; i++) {
        const cJSON *cl = cJSON_GetArrayItem(clients, i), *plan = cJSON_GetObjectItemCaseSensitive(cl, "plan");
        double v[3] = {jnum(plan, "budget_bytes", 0), jnum(plan, "predicted_peak_bytes", 0),
                       jnum(cl, "measured_peak_bytes", 0)};
        for (int k = 0; k < 3; k++) top = v[k] > top ? v[k] : top;
    }
    int row = n > 60 ? 6 : 18, h = PAD_T + row * n + PAD_B;
    fprintf(f, "<svg width=\"%d\" height=\"%d\" role=\"img\">\n<text x=\"%d\" y=\"18\" class=\"t\">Peak memory per "
            "client (log scale): budget (outline), predicted (light), measured (dark), MiB</text>\n", CHART_W, h, PAD_L);
    for (int i = 0; i < n; i++) {
        const cJSON *cl = cJSON_GetArrayItem(clients, i), *plan = cJSON_GetObjectItemCaseSensitive(cl, "plan");
        double budget = jnum(plan, "budget_bytes", 0), pred = jnum(plan, "predicted_peak_bytes", 0);
        double meas = jnum(cl, "measured_peak_bytes", 0), half = row / 2.0;
        int y = PAD_T + row * i;
        if (row >= 12) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"yl\">", PAD_L - 6, y + 12);
            esc(f, jstr(cl, "name"));
            fputs("</text>", f);
        }
        fprintf(f, "<rect class=\"s2\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", PAD_L, y + 1.0,
                mem_x(pred, top) - PAD_L, half - 1);
        fprintf(f, "<rect class=\"s1\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", PAD_L, y + half,
                mem_x(meas, top) - PAD_L, half - 1);
        if (budget > 0)
            fprintf(f, "<rect class=\"budget\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\"/>", PAD_L, y + 0.5,
                    mem_x(budget, top) - PAD_L, row - 1);
        if (row >= 12)
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"v\">%.1f / %.1f%s%.0f</text>", mem_x(top, top) + 4, y + 12,
                    pred / 1048576.0, meas / 1048576.0, budget > 0 ? " of " : "", budget > 0 ? budget / 1048576.0 : 0.0);
        fputs("\n", f);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xl\">0.5</text><text x=\"%.1f\" y=\"%d\" class=\"xl\">%.0f MiB</text>"
            "</svg>\n", PAD_L, h - 20, mem_x(top, top), h - 20, top / 1048576.0);
}

/* Rounds across, clients down: who was drawn and what came of it. */
static void timeline(FILE *f, const cJSON *rounds, const cJSON *clients) {
    int nr = cJSON_GetArraySize(rounds), nc = cJSON_GetArraySize(clients);
    if (nr == 0 || nc == 0) return;
    int cell = (CHART_W - PAD_L - PAD_R) / nr;
    if (cell > 24) cell = 24;
    if (cell < 3) cell = 3;
    int rowh = nc > 60 ? 4 : 12, h = PAD_T + rowh * nc + PAD_B;
    fprintf(f, "<svg width=\"%d\" height=\"%d\" role=\"img\">\n<text x=\"%d\" y=\"18\" class=\"t\">Participation: "
            "accepted (green), refused (orange), left (red); declined, late or missing (grey)</text>\n", CHART_W, h, PAD_L);
    for (int r = 0; r < nr; r++) {
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rounds, r), "participants")) {
            int id = (int)jnum(p, "client", -1);
            if (id < 0 || id >= nc) continue;
            const char *st = jstr(p, "status");
            const char *cls = !strcmp(st, "ok") ? "ok" : !strcmp(st, "refused") ? "ref" : !strcmp(st, "left") ? "left" : "miss";
            fprintf(f, "<rect class=\"%s\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>", cls, PAD_L + r * cell,
                    PAD_T + id * rowh, cell - 1, rowh - 1);
        }
        fputs("\n", f);
    }
    if (rowh >= 12)
        for (int i = 0; i < nc; i++) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"yl\">", PAD_L - 6, PAD_T + i * rowh + 10);
            esc(f, jstr(cJSON_GetArrayItem(clients, i), "name"));
            fputs("</text>", f);
        }
    fprintf(f, "\n<text x=\"%d\" y=\"%d\" class=\"xl\">rounds 1 .. %d</text></svg>\n", (CHART_W + PAD_L) / 2, h - 8, nr);
}

static void summary(FILE *f, const cJSON *rep) {
    static const char *const keys[] = {"scenario", "model", "codec", "strategy", "server_opt", "partition",
                                       "final_model_sha256"};
    fputs("<table>\n", f);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        if (!jstr(rep, keys[i])[0]) continue;
        fprintf(f, "<tr><th>%s</th><td>", keys[i]);
        esc(f, jstr(rep, keys[i]));
        fputs("</td></tr>\n", f);
    }
    fprintf(f, "<tr><th>clients</th><td>%d, %g per round</td></tr>\n", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(rep, "clients")),
            jnum(rep, "clients_per_round", 0));
    fprintf(f, "<tr><th>rounds</th><td>%g of %g aggregated</td></tr>\n", jnum(rep, "rounds_aggregated", 0),
            jnum(rep, "rounds_planned", 0));
    fprintf(f, "<tr><th>final test accuracy</th><td>%.4f</td></tr>\n", jnum(rep, "final_test_acc", 0));
    fprintf(f, "<tr><th>wall time</th><td>%.1f s</td></tr>\n</table>\n", jnum(rep, "wall_s", 0));
}

/* One choice of a re-plan: "4 x 64 fp32 none, 2.08 MiB". */
static void choice(FILE *f, const cJSON *c) {
    if (!cJSON_IsObject(c)) {
        fputs("none", f);
        return;
    }
    fprintf(f, "%g x %g ", jnum(c, "accumulation_steps", 1), jnum(c, "batch", 0));
    esc(f, jstr(c, "precision"));
    fputs(" ", f);
    esc(f, jstr(c, "checkpoint"));
    fprintf(f, ", %.2f MiB", jnum(c, "predicted_peak_bytes", 0) / 1048576.0);
}

/* The plans clients changed when their memory shrank (coordinator/replan.c). */
static void replans_table(FILE *f, const cJSON *replans) {
    if (cJSON_GetArraySize(replans) == 0) return;
    fputs("<h2>re-plans</h2>\n<table>\n<tr><th>round</th><th>client</th><th>old plan</th><th>new plan</th>"
          "<th>budget</th></tr>\n", f);
    const cJSON *e;
    cJSON_ArrayForEach(e, replans) {
        fprintf(f, "<tr><td>%g</td><td>", jnum(e, "round", 0));
        esc(f, jstr(e, "name"));
        fputs("</td><td>", f);
        choice(f, cJSON_GetObjectItemCaseSensitive(e, "old"));
        fputs("</td><td>", f);
        choice(f, cJSON_GetObjectItemCaseSensitive(e, "new"));
        fprintf(f, "</td><td>%.2f MiB</td></tr>\n", jnum(e, "budget_bytes", 0) / 1048576.0);
    }
    fputs("</table>\n", f);
}

int hfl_html_report(const cJSON *rep, const char *path, char *err) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return hfl_errf(err, "cannot write %s", tmp);
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(rep, "rounds");
    const cJSON *clients = cJSON_GetObjectItemCaseSensitive(rep, "clients");
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>hfl run: ", f);
    esc(f, jstr(rep, "scenario")[0] ? jstr(rep, "scenario") : jstr(rep, "model"));
    fputs("</title>\n<style>\nbody{font:14px sans-serif;margin:24px;color:#222;background:#fff}"
          "svg{display:block;margin:18px 0}.t{font-weight:bold;font-size:14px}"
          ".yl{font-size:11px;text-anchor:end}.xl{font-size:11px;text-anchor:middle}.v{font-size:10px}"
          ".ax{stroke:#444}.grid{stroke:#ddd}polyline.s1{fill:none;stroke:#1f5fa8;stroke-width:2}"
          "circle.s1,rect.s1{fill:#1f5fa8}rect.s2{fill:#9cc3ea}.budget{fill:none;stroke:#b22;stroke-width:1.5}"
          ".ok{fill:#2a9d4b}.ref{fill:#e08a1e}.left{fill:#c0392b}.miss{fill:#bbb}"
          "table{border-collapse:collapse}th,td{text-align:left;padding:2px 10px;border-bottom:1px solid #eee}"
          "</style></head><body>\n<h1>hfl run</h1>\n", f);
    summary(f, rep);
    accuracy_charts(f, rounds);
    bytes_chart(f, rounds);
    memory_chart(f, clients);
    timeline(f, rounds, clients);
    replans_table(f, cJSON_GetObjectItemCaseSensitive(rep, "replans"));
    fputs("</body></html>\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        remove(tmp);
        return hfl_errf(err, "cannot write %s", tmp);
    }
    if (rename(tmp, path) != 0) return hfl_errf(err, "cannot rename %s to %s", tmp, path);
    return 0;
}
