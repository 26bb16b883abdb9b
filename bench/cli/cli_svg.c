/* cli_svg.c - a small log-log line plot in SVG, drawn by hand so the bench
 * has no plotting dependency: axes, decade grid with 2/5 minor ticks, one
 * polyline with markers per series, a legend, title and axis labels. */
#include "bench_cli.h"

#include <math.h>
#include <stdio.h>

#define W 860.0
#define H 520.0
#define ML 90.0   /* margins: left, right (legend), top, bottom */
#define MR 250.0
#define MT 50.0
#define MB 70.0

static double lx(double v, double lo, double hi)
{
    return ML + (log10(v) - lo) / (hi - lo) * (W - ML - MR);
}

static double ly(double v, double lo, double hi)
{
    return H - MB - (log10(v) - lo) / (hi - lo) * (H - MT - MB);
}

static void fmt_num(char *b, size_t n, double v)
{
    if (v >= 1e6 || v < 1e-2)
        snprintf(b, n, "%.0e", v);
    else
        snprintf(b, n, "%g", v);
}

int cli_svg_plot(const char *path, const char *title, const char *xlabel,
                 const char *ylabel, const double *xs, size_t n,
                 const cli_series *series, size_t n_series)
{
    if (!path || !xs || !n || !series || !n_series)
        return RT_EINVAL;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (xs[i] > 0) {
            xmin = fmin(xmin, xs[i]);
            xmax = fmax(xmax, xs[i]);
        }
        for (size_t s = 0; s < n_series; s++) {
            double y = series[s].y[i];
            if (y > 0 && isfinite(y)) {
                ymin = fmin(ymin, y);
                ymax = fmax(ymax, y);
            }
        }
    }
    if (!isfinite(xmin) || !isfinite(ymin))
        return RT_EINVAL;
    double xlo = log10(xmin), xhi = log10(xmax);
    if (xhi - xlo < 1e-9) {
        xlo -= 0.5;
        xhi += 0.5;
    }
    xlo -= 0.05 * (xhi - xlo);
    xhi += 0.05 * (xhi - xlo);
    double ylo = floor(log10(ymin)), yhi = ceil(log10(ymax));
    if (yhi - ylo < 1)
        yhi = ylo + 1;

    FILE *f = fopen(path, "w");
    if (!f)
        return RT_EIO;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.1f\" y=\"28\" font-size=\"17\" text-anchor=\"middle\">%s</text>\n",
            (ML + W - MR) / 2, title ? title : "");
    /* Grid and y ticks: decades (labelled) and 2, 5 in between. */
    for (double d = ylo; d <= yhi + 1e-9; d += 1) {
        for (int m = 1; m <= 9; m++) {
            double v = pow(10, d) * m;
            if (log10(v) > yhi + 1e-9)
                break;
            double y = ly(v, ylo, yhi);
            if (m == 1) {
                char b[32];
                fmt_num(b, sizeof b, v);
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                        "stroke=\"#ccc\"/>\n", ML, y, W - MR, y);
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                        "text-anchor=\"end\">%s</text>\n", ML - 8, y + 4, b);
            } else if (m == 2 || m == 5) {
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                        "stroke=\"#eee\"/>\n", ML, y, W - MR, y);
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                        "stroke=\"#000\"/>\n", ML - 4, y, ML, y);
            }
        }
    }
    /* x ticks at the data's x values (powers of two for K). */
    for (size_t i = 0; i < n; i++) {
        double x = lx(xs[i], xlo, xhi);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                x, MT, x, H - MB);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
                x, H - MB, x, H - MB + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">%g</text>\n",
                x, H - MB + 20, xs[i]);
    }
    /* Axes and labels. */
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
            ML, H - MB, W - MR, H - MB);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
            ML, MT, ML, H - MB);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" text-anchor=\"middle\">%s</text>\n",
            (ML + W - MR) / 2, H - 22, xlabel ? xlabel : "");
    fprintf(f, "<text x=\"22\" y=\"%.1f\" font-size=\"14\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 22 %.1f)\">%s</text>\n",
            (MT + H - MB) / 2, (MT + H - MB) / 2, ylabel ? ylabel : "");
    /* Series. */
    for (size_t s = 0; s < n_series; s++) {
        const char *col = series[s].color ? series[s].color : "#000";
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
                col, series[s].dashed ? " stroke-dasharray=\"7,5\"" : "");
        for (size_t i = 0; i < n; i++) {
            double y = series[s].y[i];
            if (y > 0 && isfinite(y))
                fprintf(f, "%.1f,%.1f ", lx(xs[i], xlo, xhi), ly(y, ylo, yhi));
        }
        fprintf(f, "\"/>\n");
        if (!series[s].dashed)
            for (size_t i = 0; i < n; i++) {
                double y = series[s].y[i];
                if (y > 0 && isfinite(y))
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
                            lx(xs[i], xlo, xhi), ly(y, ylo, yhi), col);
            }
        /* Legend entry. */
        double ly0 = MT + 20 + 26.0 * (double)s;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"%s/>\n", W - MR + 18, ly0, W - MR + 50, ly0, col,
                series[s].dashed ? " stroke-dasharray=\"7,5\"" : "");
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s</text>\n",
                W - MR + 58, ly0 + 4, series[s].name ? series[s].name : "");
    }
    fprintf(f, "</svg>\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return RT_EIO;
    return 0;
}
