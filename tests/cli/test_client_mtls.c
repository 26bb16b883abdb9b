/* test_client_mtls.c - librtrain against an rtraind that requires client
 * certificates (--tls-client-ca) and tokens: without a client certificate,
 * or with one another CA signed, the first call fails UNAVAILABLE (the
 * handshake is refused); with the right one the client trains the iris
 * model to validation accuracy >= 0.9. mtls_e2e.sh makes the certificates
 * and starts the daemon.
 *
 * usage: test_client_mtls ADDR PKI_DIR TOKEN EXAMPLES_DIR */
#include <stdio.h>
#include <string.h>

#include "rtrain/rtrain.h"

#include "../lib/rt_check.h"

static const char *addr, *pki, *token;

/* connect with ca (always) and cert/key names under PKI_DIR (NULL: none) */
static rt_client *client(const char *ca, const char *cert, const char *key)
{
    char pca[512], pcert[512], pkey[512], err[256];
    snprintf(pca, sizeof pca, "%s/%s", pki, ca);
    snprintf(pcert, sizeof pcert, "%s/%s", pki, cert ? cert : "");
    snprintf(pkey, sizeof pkey, "%s/%s", pki, key ? key : "");
    rt_client_opts o;
    rt_client_opts_init(&o);
    o.target = addr;
    o.tls_ca = pca;
    o.tls_cert = cert ? pcert : NULL;
    o.tls_key = key ? pkey : NULL;
    o.token = token;
    o.no_env = 1;
    rt_client *c = NULL;
    if (rt_client_connect(&o, &c, err, sizeof err) < 0)
        fprintf(stderr, "connect: %s\n", err);
    return c;
}

/* The first call of a client the daemon must refuse. */
static void refused(const char *what, const char *cert, const char *key)
{
    rt_client *c = client("ca.pem", cert, key);
    CHECK(c != NULL && rt_client_is_tls(c));
    uint64_t rtt = 0;
    int rc = c ? rt_client_ping(c, 0, &rtt) : 0;
    printf("%s: %s (%s)\n", what, rt_err_name(rc), c ? rt_client_errmsg(c) : "-");
    CHECK(rc == RT_EUNAVAILABLE);
    rt_client_destroy(c);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s ADDR PKI_DIR TOKEN EXAMPLES_DIR\n", argv[0]);
        return 2;
    }
    addr = argv[1];
    pki = argv[2];
    token = argv[3];
    refused("no client certificate", NULL, NULL);
    refused("a client certificate of another CA", "other.pem", "other.key");

    rt_client *c = client("ca.pem", "cli.pem", "cli.key");
    CHECK(c != NULL && rt_client_is_tls(c));
    if (!c)
        return 1;
    char sid[RT_ID_MAX], model[512], train[512], val[512], json[8192] = {0};
    snprintf(model, sizeof model, "%s/model.json", argv[4]);
    snprintf(train, sizeof train, "%s/train_shuffled.csv", argv[4]);
    snprintf(val, sizeof val, "%s/val_shuffled.csv", argv[4]);
    FILE *f = fopen(model, "r");
    CHECK(f && fread(json, 1, sizeof json - 1, f) > 0);
    if (f)
        fclose(f);
    int rc = rt_client_session_create(c, "mtls", sid);
    CHECK(rc == 0);
    rt_train_opts o;
    rt_train_opts_init(&o);
    o.loss = "sparse_categorical_crossentropy";
    o.optimizer = "adam";
    o.lr = 0.02f;
    o.batch_size = 20;
    o.seed = 1;
    rt_client_compile_result prog;
    memset(&prog, 0, sizeof prog);
    rt_client_dataset tr, va;
    CHECK(rc == 0 && (rc = rt_client_compile_keras(c, sid, json, &o, &prog)) == 0);
    CHECK(rc == 0 && (rc = rt_client_upload_csv(c, sid, "train", train, -1, 0, &tr)) == 0);
    CHECK(rc == 0 && (rc = rt_client_upload_csv(c, sid, "val", val, -1, 0, &va)) == 0);
    rt_client_metrics m = {0};
    if (rc == 0) {
        rt_client_fit_params fp = {.session = sid, .program = prog.program_id, .dataset = tr.id,
                                   .val_dataset = va.id, .epochs = 60};
        CHECK((rc = rt_client_fit(c, &fp, NULL, NULL)) == 0);
        CHECK(rc == 0 && (rc = rt_client_evaluate(c, sid, prog.program_id, va.id, &m)) == 0);
    }
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", rt_err_name(rc), rt_client_errmsg(c));
    printf("the right certificate: trained, val accuracy %.4f over %llu samples\n", m.accuracy,
           (unsigned long long)m.samples);
    CHECK(m.samples == 45 && m.accuracy >= 0.9);
    CHECK(rt_client_session_close(c, sid) == 0);
    rt_client_compile_result_free(&prog);
    rt_client_destroy(c);
    printf("%d/%d checks passed\n", checks - failures, checks);
    return failures ? 1 : 0;
}
