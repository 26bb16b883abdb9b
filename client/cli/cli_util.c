/* cli_util.c - output helpers of `rtrain`: statistics, the timing table,
 * .npy and CSV writers. (The progress display is librtrain's rt_progress.) */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double cli_percentile(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    if (p <= 0)
        return v[0];
    if (p >= 100)
        return v[n - 1];
    /* Nearest rank: the smallest value with at least p% of values <= it. */
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    return v[rank - 1];
}

void cli_print_timings(FILE *f, const rt_client_timings *calls, size_t n)
{
    fprintf(f, "%-14s %9s %9s %9s %10s %9s %10s | %9s %10s %9s %10s %10s %9s %6s\n", "call (us)",
            "queue", "decode", "compile", "execute", "encode", "srv total", "cl encode",
            "round trip", "cl decode", "wire+fw", "unattrib", "in-stream", "cache");
    rt_client_timings sum;
    memset(&sum, 0, sizeof sum);
    for (size_t i = 0; i < n; i++) {
        const rt_client_timings *t = &calls[i];
        fprintf(f,
                "%-14s %9.1f %9.1f %9.1f %10.1f %9.1f %10.1f | %9.1f %10.1f "
                "%9.1f %10.1f %10.1f %9.1f %6s\n",
                t->method ? t->method : "?", t->queue_ns / 1e3, t->decode_ns / 1e3,
                t->compile_ns / 1e3, t->execute_ns / 1e3, t->encode_ns / 1e3,
                t->server_total_ns / 1e3, t->client_encode_ns / 1e3, t->round_trip_ns / 1e3,
                t->client_decode_ns / 1e3, t->wire_ns / 1e3, t->unattributed_ns / 1e3,
                t->client_stream_ns / 1e3,
                !t->has_server ? "n/a"
                : t->cache_hit ? "hit"
                               : "-");
        sum.queue_ns += t->queue_ns;
        sum.decode_ns += t->decode_ns;
        sum.compile_ns += t->compile_ns;
        sum.execute_ns += t->execute_ns;
        sum.encode_ns += t->encode_ns;
        sum.server_total_ns += t->server_total_ns;
        sum.client_encode_ns += t->client_encode_ns;
        sum.round_trip_ns += t->round_trip_ns;
        sum.client_decode_ns += t->client_decode_ns;
        sum.wire_ns += t->wire_ns;
        sum.unattributed_ns += t->unattributed_ns;
        sum.client_total_ns += t->client_total_ns;
        sum.client_stream_ns += t->client_stream_ns;
    }
    if (n > 1)
        fprintf(f,
                "%-14s %9.1f %9.1f %9.1f %10.1f %9.1f %10.1f | %9.1f %10.1f "
                "%9.1f %10.1f %10.1f %9.1f\n",
                "total", sum.queue_ns / 1e3, sum.decode_ns / 1e3, sum.compile_ns / 1e3,
                sum.execute_ns / 1e3, sum.encode_ns / 1e3, sum.server_total_ns / 1e3,
                sum.client_encode_ns / 1e3, sum.round_trip_ns / 1e3, sum.client_decode_ns / 1e3,
                sum.wire_ns / 1e3, sum.unattributed_ns / 1e3, sum.client_stream_ns / 1e3);
    fprintf(f,
            "(%zu calls; wire+fw = round trip - server total; unattributed = "
            "server other + client time outside encode/round trip/decode;\n"
            " in-stream = client work while a stream was open, inside its round "
            "trip; calls' wall total %.1f us)\n",
            n, sum.client_total_ns / 1e3);
}

char *cli_read_file(const char *path, size_t *len)
{
    int from_stdin = strcmp(path, "-") == 0;
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                errno = ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    if (!from_stdin)
        fclose(f);
    if (!buf)
        return NULL;
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

/* ------------------------------------------------------------- .npy */

static const char *npy_descr(rt_client_dtype dt)
{
    switch (dt) {
    case RT_DTYPE_F32: return "<f4";
    case RT_DTYPE_I32: return "<i4";
    case RT_DTYPE_I64: return "<i8";
    case RT_DTYPE_U8: return "|u1";
    }
    return NULL;
}

int cli_npy_write(const char *path, rt_client_dtype dt, int ndim, const int64_t *shape,
                  const void *data)
{
    const char *descr = npy_descr(dt);
    if (!descr || ndim < 0 || ndim > RT_CLIENT_MAX_DIMS)
        return RT_EINVAL;
    char dict[512];
    size_t at = (size_t)snprintf(dict, sizeof dict,
                                 "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    size_t n = rt_client_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        at += (size_t)snprintf(dict + at, sizeof dict - at, "%lld%s", (long long)shape[i],
                               ndim == 1      ? ","
                               : i + 1 < ndim ? ", "
                                              : "");
        n *= (size_t)shape[i];
    }
    at += (size_t)snprintf(dict + at, sizeof dict - at, "), }");
    /* magic(6) + version(2) + len(2) + dict + padding + '\n' ≡ 0 mod 64 */
    size_t hlen = at + 1;
    size_t pad = (64 - (10 + hlen) % 64) % 64;
    hlen += pad;
    FILE *f = fopen(path, "wb");
    if (!f)
        return RT_EIO;
    uint8_t pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(hlen & 0xff), (uint8_t)(hlen >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, at, f) == at;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (n == 0 || fwrite(data, 1, n, f) == n);
    ok = (fclose(f) == 0) && ok;
    return ok ? 0 : RT_EIO;
}

int cli_csv_write_tensor(const char *path, const rt_client_tensor *t)
{
    if (!t || t->ndim < 1 || t->ndim > 2 || t->dtype != RT_DTYPE_F32)
        return RT_EINVAL;
    int to_stdout = strcmp(path, "-") == 0;
    FILE *f = to_stdout ? stdout : fopen(path, "w");
    if (!f)
        return RT_EIO;
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    const float *v = t->data;
    for (int64_t r = 0; r < rows && !ferror(f); r++) {
        for (int64_t c = 0; c < cols; c++)
            fprintf(f, "%s%.9g", c ? "," : "", (double)v[r * cols + c]);
        fputc('\n', f);
    }
    int bad = ferror(f);
    if (to_stdout) {
        /* `predict --out - | head`: a reader that stops early is no error. */
        if (fflush(f) != 0 && errno != EPIPE)
            bad = 1;
        else if (bad && errno == EPIPE)
            bad = 0;
        return bad ? RT_EIO : 0;
    }
    if (fclose(f) != 0 || bad)
        return RT_EIO;
    return 0;
}
