/*
 * test_onnx_bad.c - the ONNX importer on the cases of cases.txt (made with
 * the files of tests/fuzz/onnx by gen_onnx_seeds.py): models that must
 * import and compile, and bad ones that must fail with the listed code and
 * a message holding the listed text. Then every case's bytes mutated (byte
 * flips and truncations, deterministic) must import or fail cleanly.
 *
 *     test_onnx_bad <tests/onnx> <tests/fuzz/onnx>
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_onnx.h"
#include "rt_test.h"

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* import (and compile what imports); 0 or the code, err filled */
static int try_import(const uint8_t *b, size_t len, char *err, size_t errlen, int compile)
{
    rt_graph *g = (rt_graph *)1;
    rt_onnx_opts io = {0};
    int rc = rt_onnx_import_opts(b, len, &io, &g, err, errlen);
    if (rc < 0) {
        CHECK(g == NULL);
        CHECK(err[0] != 0 && strlen(err) < errlen);
        return rc;
    }
    if (compile) {
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_SPARSE_CE;
        cfg.from_logits = 1;
        /* every model that imports compiles and trains, whatever its output
         * ends in (the loss-fit check has its own tests) */
        cfg.loss_check = 0;
        cfg.batch_size = 4;
        /* several outputs: each with mse, f32 labels of its shape */
        for (int k = 0; k < io.n_outputs && io.n_outputs > 1; k++)
            cfg.heads[k] = (struct rt_loss_head){.loss = RT_LOSS_MSE, .weight = 1.0f};
        if (io.n_outputs > 1) {
            cfg.n_heads = io.n_outputs;
            cfg.label_dtype = RT_F32;
        }
        rt_plan *p;
        rc = rt_plan_compile(g, &cfg, &p, NULL, err, errlen);
        if (rc == 0) {
            rt_exec *e;
            CHECK_RC(rt_exec_create(p, &e));
            int64_t in[RT_MAX_DIMS], n = 4;
            int nd = rt_plan_input_shape(p, in);
            for (int k = 0; k < nd; k++) n *= in[k];
            float *x = calloc((size_t)n, sizeof(float));
            int32_t y[4] = {0, 1, 0, 1};
            int64_t ld[RT_MAX_DIMS], ln = 4;
            for (int k = 0, lnd = rt_plan_label_shape(p, ld); k < lnd; k++) ln *= ld[k];
            float *yf = io.n_outputs > 1 ? calloc((size_t)ln, sizeof(float)) : NULL;
            for (int64_t k = 0; k < n; k++) x[k] = (float)((k * 7) % 11) / 11.0f - 0.5f;
            rt_data d = {.x = x, .y = yf ? (const void *)yf : y,
                         .y_dtype = yf ? RT_F32 : RT_I32, .n = 4};
            rt_train_result r;
            CHECK_RC(rt_exec_train(e, &d, 2, &r, NULL, NULL, NULL));
            CHECK(isfinite(r.last.loss));
            free(x);
            free(yf);
            rt_exec_destroy(e);
            rt_plan_release(p);
        }
    }
    rt_graph_destroy(g);
    return rc;
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 3);
    char path[1024], line[1024];
    snprintf(path, sizeof path, "%s/cases.txt", argv[1]);
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    int n = 0, ok = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = 0;
        char *file = strtok(line, "\t"), *code = strtok(NULL, "\t"), *text = strtok(NULL, "\t");
        REQUIRE(file && code);
        snprintf(path, sizeof path, "%s/%s", argv[2], file);
        size_t len;
        uint8_t *b = read_all(path, &len);
        char err[768] = "";
        int rc = try_import(b, len, err, sizeof err, 1);
        n++;
        if (strcmp(rt_err_name(rc), code) != 0 || (text && !strstr(err, text))) {
            fprintf(stderr, "%s: got %s '%s', want %s '%s'\n", file, rt_err_name(rc), err,
                    code, text ? text : "");
            rt_test_failures++;
        } else {
            ok++;
            printf("%-24s %-16s %s\n", file, code, err);
        }
        /* mutations: each must import or fail with a message, no crash */
        for (size_t k = 0; k < 64 && len; k++) {
            uint8_t *m = malloc(len);
            memcpy(m, b, len);
            const size_t at = (k * 2654435761u) % len;
            m[at] ^= (uint8_t)(1u << (k % 8));
            char e2[256];
            try_import(m, k % 4 == 3 ? at : len, e2, sizeof e2, 0);
            free(m);
        }
        free(b);
    }
    fclose(f);
    CHECK(n >= 20);
    {
        /* Identity of a weight: the same parameter, trainable, named as the
         * initializer */
        snprintf(path, sizeof path, "%s/ok_identity_shared.onnx", argv[2]);
        size_t len;
        uint8_t *b = read_all(path, &len);
        rt_graph *g;
        char err[256];
        CHECK_RC(rt_onnx_import(b, len, NULL, &g, err, sizeof err));
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_MSE;
        cfg.label_dtype = RT_F32;
        cfg.label_ndim = 1;
        cfg.label_dims[0] = 4;
        rt_plan *p;
        CHECK_RC(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err));
        const char *nm = "";
        int64_t d[RT_MAX_DIMS];
        int tr = 0;
        CHECK(rt_plan_n_params(p) == 1);
        CHECK(rt_plan_param_info(p, 0, &nm, d, &tr) == 2 && !strcmp(nm, "w") && tr);
        rt_plan_release(p);
        rt_graph_destroy(g);
        free(b);
    }
    printf("%d/%d cases as expected\n", ok, n);
    return rt_test_done("onnx_bad");
}
