/* bench_tls.c - what TLS and bearer tokens cost a call: Ping round trips
 * to three daemons started by this program, measured in the same run on
 * warm connections, interleaved in rounds so machine load hits all three
 * alike.
 *
 *     plain         rtraind single-user, plaintext (the peer)
 *     plain+token   rtraind --tokens, plaintext, token in every call
 *     tls+token     rtraind --tokens --tls-cert/--tls-key, TLS 1.3
 *
 *     bench_tls RTRAIND [--rounds N] [--per-round N]
 *
 * The CA, the certificate (SAN IP:127.0.0.1) and the token are made in a
 * temporary directory with the openssl CLI and rtraind --new-token.
 */
#define RT_BENCH_NAME "bench_tls"
#include "../bench_util.h"

/* now_s is for timing whole runs; the round trips here come from librtrain. */
static inline void bench_unused(void) { (void)now_s; }

#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rtrain/rtrain.h"

typedef struct rt_daemon {
    pid_t pid;
    char addr[128];
} rt_daemon;

static void start(rt_daemon *d, const char *rtraind, const char *const *extra)
{
    int fds[2];
    if (pipe(fds) < 0)
        die("pipe", "failed");
    const char *argv[24];
    int n = 0;
    argv[n++] = rtraind;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--log-level";
    argv[n++] = "error";
    for (int i = 0; extra && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = fork();
    if (d->pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv(rtraind, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    char line[120];
    size_t got = 0;
    while (got < sizeof line - 1) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        if (poll(&p, 1, 30000) <= 0 || read(fds[0], line + got, 1) != 1)
            break;
        if (line[got++] == '\n')
            break;
    }
    line[got] = 0;
    close(fds[0]);
    const char *pfx = "rtraind listening on ";
    if (strncmp(line, pfx, strlen(pfx)) != 0)
        die("rtraind did not start", line);
    line[strcspn(line, "\n")] = 0;
    snprintf(d->addr, sizeof d->addr, "%s", line + strlen(pfx));
}

static void stop(rt_daemon *d)
{
    kill(d->pid, SIGTERM);
    waitpid(d->pid, NULL, 0);
}

static double pct(double *v, int n, double p)
{
    /* v sorted by median() */
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_tls RTRAIND [--rounds N] [--per-round N]\n");
        return 2;
    }
    char rtraind[4096];
    if (!realpath(argv[1], rtraind))
        die("rtraind", argv[1]);
    int rounds = 30, per = 200;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--per-round"))
            per = atoi(argv[i + 1]);
    }
    if (rounds < 1 || per < 1)
        die("arguments", "--rounds and --per-round must be >= 1");

    char dir[] = "/tmp/rt-bench-tls-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", "failed");
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && exec >setup.log 2>&1 && "
             "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "  -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "  -keyout srv.key -out srv.csr -subj /CN=rtraind && "
             "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
             "  -out srv.pem -days 2 -extfile san.ext && "
             "%s --new-token bench > tokens.txt 2> token.txt",
             dir, rtraind);
    if (system(cmd) != 0)
        die("setup (openssl, rtraind --new-token)", dir);
    char path[512], tok[128] = "";
    snprintf(path, sizeof path, "%s/token.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(tok, sizeof tok, f))
        die("token", path);
    fclose(f);
    tok[strcspn(tok, "\n")] = 0;
    const char *token = strrchr(tok, ' ') ? strrchr(tok, ' ') + 1 : tok;

    char tokens[512], cert[512], key[512], ca[512];
    snprintf(tokens, sizeof tokens, "%s/tokens.txt", dir);
    snprintf(cert, sizeof cert, "%s/srv.pem", dir);
    snprintf(key, sizeof key, "%s/srv.key", dir);
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);

    enum { PLAIN, PLAIN_TOKEN, TLS_TOKEN, N };
    const char *names[N] = {"plain", "plain+token", "tls+token"};
    rt_daemon d[N];
    const char *a_plain[] = {NULL};
    const char *a_tok[] = {"--tokens", tokens, NULL};
    const char *a_tls[] = {"--tokens", tokens, "--tls-cert", cert, "--tls-key", key, NULL};
    start(&d[PLAIN], rtraind, a_plain);
    start(&d[PLAIN_TOKEN], rtraind, a_tok);
    start(&d[TLS_TOKEN], rtraind, a_tls);

    rt_client *c[N];
    for (int k = 0; k < N; k++) {
        rt_client_opts o;
        rt_client_opts_init(&o);
        o.no_env = 1;
        o.target = d[k].addr;
        if (k != PLAIN)
            o.token = token;
        if (k == TLS_TOKEN)
            o.tls_ca = ca;
        char err[256];
        if (rt_client_connect(&o, &c[k], err, sizeof err) < 0)
            die("connect", err);
        /* Warm: connection, TLS handshake, first-call allocations. */
        for (int i = 0; i < 200; i++)
            if (rt_client_ping(c[k], 0, NULL) < 0)
                die(names[k], rt_client_errmsg(c[k]));
    }

    int total = rounds * per;
    double *rtt[N];
    for (int k = 0; k < N; k++)
        rtt[k] = malloc(sizeof(double) * (size_t)total);
    for (int r = 0; r < rounds; r++)
        for (int k0 = 0; k0 < N; k0++) {
            int k = (k0 + r) % N; /* rotate who goes first */
            for (int i = 0; i < per; i++) {
                uint64_t ns = 0;
                if (rt_client_ping(c[k], 0, &ns) < 0)
                    die(names[k], rt_client_errmsg(c[k]));
                rtt[k][r * per + i] = (double)ns / 1000.0;
            }
        }

    double p50[N], p99[N];
    for (int k = 0; k < N; k++) {
        p50[k] = median(rtt[k], total);
        p99[k] = pct(rtt[k], total, 0.99);
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("bench_tls: tiny Ping, warm connections, %d rounds x %d calls per daemon, "
           "interleaved; client and daemons unpinned on %ld CPUs\n\n",
           rounds, per, ncpu);
    printf("| %-12s | %9s | %9s | %12s |\n", "daemon", "p50 us", "p99 us", "p50 / plain");
    printf("| %-12s | %9s | %9s | %12s |\n", "---", "---:", "---:", "---:");
    for (int k = 0; k < N; k++)
        printf("| %-12s | %9.1f | %9.1f | %11.2fx |\n", names[k], p50[k], p99[k],
               p50[k] / p50[PLAIN]);

    for (int k = 0; k < N; k++) {
        rt_client_destroy(c[k]);
        stop(&d[k]);
        free(rtt[k]);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_tls: could not remove %s\n", dir);
    return 0;
}
