/* bench_keras_import.c - import + compile time of real Keras models against
 * the json-c parse of the same text (see README.md). */
#define RT_BENCH_NAME "bench_keras_import"
#include <dirent.h>
#include <json-c/json.h>
#include <stdint.h>
#include <string.h>

#include "bench_util.h"
#include "import_keras.h"
#include "rt_engine.h"

#define REPS 9

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

static int compile(rt_graph *g, rt_plan **p, char *err, size_t errlen)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.batch_size = 32;
    cfg.metrics = 0;
    int rc = rt_plan_compile(g, &cfg, p, NULL, err, errlen);
    if (rc < 0)
        return rc;
    int64_t d[RT_MAX_DIMS];
    int n = rt_plan_output_shape(*p, d);
    rt_plan_release(*p);
    cfg.label_ndim = n;
    memcpy(cfg.label_dims, d, sizeof d);
    return rt_plan_compile(g, &cfg, p, NULL, err, errlen);
}

static void train_epoch(rt_plan *p, double *secs)
{
    int64_t d[RT_MAX_DIMS], xn = 1, yn = 1;
    for (int i = 0, n = rt_plan_input_shape(p, d); i < n; i++) xn *= d[i];
    for (int i = 0, n = rt_plan_output_shape(p, d); i < n; i++) yn *= d[i];
    float *x = calloc((size_t)(4 * xn), sizeof(float)), *y = calloc((size_t)(4 * yn), sizeof(float));
    rt_exec *e = NULL;
    double t0 = now_s();
    if (x && y && rt_exec_create(p, &e) == 0) {
        rt_data dd = {.x = x, .y = y, .y_dtype = RT_F32, .n = 4};
        rt_train_result r;
        rt_exec_train(e, &dd, 2, &r, NULL, NULL, NULL);
    }
    *secs = now_s() - t0;
    rt_exec_destroy(e);
    free(x);
    free(y);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int train = 0;
    char *files[512];
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--train")) {
            train = 1;
            continue;
        }
        DIR *dir = opendir(argv[i]);
        if (!dir) {
            if (nf < 512) files[nf++] = strdup(argv[i]);
            continue;
        }
        struct dirent *de;
        while ((de = readdir(dir)) && nf < 512) {
            size_t l = strlen(de->d_name);
            if (l > 5 && !strcmp(de->d_name + l - 5, ".json")) {
                char *p = malloc(strlen(argv[i]) + l + 2);
                sprintf(p, "%s/%s", argv[i], de->d_name);
                files[nf++] = p;
            }
        }
        closedir(dir);
    }
    if (!nf) {
        fprintf(stderr, "usage: %s <corpus dir | model.json>... [--train]\n", argv[0]);
        return 2;
    }
    qsort(files, (size_t)nf, sizeof files[0], cmp_str);
    printf("%-42s %8s %6s %10s %9s %9s %9s %9s %7s%s\n", "model", "bytes", "nodes", "params",
           "parse ms", "import ms", "compile", "imp+comp", "x parse", train ? "  epoch s" : "");
    static char err[4096];
    for (int f = 0; f < nf; f++) {
        size_t len = 0;
        char *js = slurp(files[f], &len);
        const char *base = strrchr(files[f], '/') ? strrchr(files[f], '/') + 1 : files[f];
        if (!js)
            die("read", files[f]);
        double tp[REPS], ti[REPS], tc[REPS], tt[REPS];
        rt_graph *g = NULL;
        int rc = rt_keras_import(js, len, &g, err, sizeof err);
        if (rc < 0) {
            char *nl = strchr(err, ';');
            if (nl) *nl = 0;
            printf("%-42s does not import: %.90s\n", base, err);
            free(js);
            continue;
        }
        rt_graph_destroy(g);
        uint64_t params = 0;
        uint32_t nodes = 0;
        rt_plan *keep = NULL;
        for (int r = 0; r < REPS; r++) {
            double t0 = now_s();
            json_object *o = json_tokener_parse(js);
            tp[r] = now_s() - t0;
            json_object_put(o);
            t0 = now_s();
            if (rt_keras_import(js, len, &g, err, sizeof err) < 0)
                die("import", err);
            double t1 = now_s();
            rt_plan *p = NULL;
            rc = compile(g, &p, err, sizeof err);
            double t2 = now_s();
            ti[r] = t1 - t0;
            tc[r] = t2 - t1;
            tt[r] = t2 - t0;
            rt_graph_destroy(g);
            if (rc < 0)
                break;
            params = rt_plan_report(p)->param_count;
            nodes = rt_plan_report(p)->n_nodes;
            if (r == REPS - 1)
                keep = p;
            else
                rt_plan_release(p);
        }
        if (rc < 0) {
            printf("%-42s does not compile: %.90s\n", base, err);
            free(js);
            continue;
        }
        double mp = median(tp, REPS), mi = median(ti, REPS), mc = median(tc, REPS),
               mt = median(tt, REPS);
        printf("%-42s %8zu %6u %10llu %9.3f %9.3f %9.3f %9.3f %7.1f", base, len, nodes,
               (unsigned long long)params, mp * 1e3, mi * 1e3, mc * 1e3, mt * 1e3, mt / mp);
        if (train) {
            double secs = 0;
            train_epoch(keep, &secs);
            printf("  %7.2f", secs);
        }
        printf("\n");
        rt_plan_release(keep);
        free(js);
    }
    for (int f = 0; f < nf; f++) free(files[f]);
    return 0;
}
