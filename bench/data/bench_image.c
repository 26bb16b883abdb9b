/*
 * bench_image.c - JPEG decode + resize + augment throughput of the daemon's
 * image path (rt_image.c) at SIZE x SIZE, one thread, against PIL in a loop
 * (pil_peer.py, same images, same steps in numpy) and against TurboJPEG's
 * decode alone (what tjbench measures: the ceiling for the decode step).
 *
 *   bench_image [--images N] [--reps R] [--size S] [--dir D]
 *
 * Images: N synthetic 500 x 375 JPEG photos (quality 90) written by
 * pil_peer.py into D (default a temporary folder). Prints medians over R
 * repetitions, as images/s and as ratios to PIL.
 */
#define RT_BENCH_NAME "bench_image"
#include "../bench_util.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <omp.h>

#include "rt_image.h"

#ifndef RT_SOURCE_DIR
#define RT_SOURCE_DIR "."
#endif

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static blob *load(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (!d)
        die("opendir", dir);
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096)
        if (strstr(e->d_name, ".jpg"))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    blob *b = calloc((size_t)n, sizeof *b);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f)
            die("open", path);
        fseek(f, 0, SEEK_END);
        b[i].n = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        b[i].p = malloc(b[i].n);
        if (fread(b[i].p, 1, b[i].n, f) != b[i].n)
            die("read", path);
        fclose(f);
        free(names[i]);
    }
    *count = n;
    return b;
}

int main(int argc, char **argv)
{
    int n_img = 200, reps = 5, size = 224;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--images")) n_img = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--size")) size = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else die("usage", "bench_image [--images N] [--reps R] [--size S] [--dir D]");
    }
    if (reps < 1 || reps > 100 || size < 8 || n_img < 1)
        die("usage", "bad --reps, --size or --images");
    omp_set_num_threads(1);
    char tmpl[] = "/tmp/bench_image.XXXXXX";
    if (!dir) {
        if (!mkdtemp(tmpl))
            die("mkdtemp", "failed");
        dir = tmpl;
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/data/pil_peer.py make %s %d", RT_SOURCE_DIR,
             dir, n_img);
    if (system(cmd) != 0)
        die("pil_peer.py make", "failed (python3-pil installed?)");
    int n;
    blob *b = load(dir, &n);
    size_t raw = 0;
    for (int i = 0; i < n; i++)
        raw += b[i].n;

    rt_image_spec s = {.h = size, .w = size, .c = 3, .mean = {0.5f, 0.5f, 0.5f},
                       .std = {0.25f, 0.25f, 0.25f}, .crop_pad = 4, .flip = 1,
                       .brightness = 0.1f, .contrast = 0.2f};
    uint8_t *small = malloc((size_t)size * size * 3);
    float *x = malloc(sizeof(float) * (size_t)size * size * 3);
    double dec[100], full[100], resz[100];
    char err[256];
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (int i = 0; i < n; i++) {
            uint8_t *px;
            int w, h;
            if (rt_image_decode(b[i].p, b[i].n, RT_IMG_JPEG, 3, 1 << 26, &px, &w, &h, err,
                                sizeof err) < 0)
                die("decode", err);
            free(px);
        }
        double t1 = now_s();
        for (int i = 0; i < n; i++) {
            uint8_t *px;
            int w, h;
            rt_image_decode_for(b[i].p, b[i].n, RT_IMG_JPEG, 3, 1 << 26, size, size, &px, &w, &h,
                                err, sizeof err);
            rt_image_resize(px, w, h, 3, small, size, size, RT_RESIZE_BILINEAR);
            free(px);
        }
        double t2 = now_s();
        for (int i = 0; i < n; i++) {
            uint8_t *px;
            int w, h;
            rt_image_decode_for(b[i].p, b[i].n, RT_IMG_JPEG, 3, 1 << 26, size, size, &px, &w, &h,
                                err, sizeof err);
            rt_image_resize(px, w, h, 3, small, size, size, RT_RESIZE_BILINEAR);
            free(px);
            rt_image_aug a;
            rt_image_aug_draw(&s, 1, (uint64_t)r, (uint64_t)i, &a);
            rt_image_to_input(&s, small, x, &a);
        }
        double t3 = now_s();
        dec[r] = n / (t1 - t0);
        resz[r] = n / (t2 - t1);
        full[r] = n / (t3 - t2);
    }
    /* the peer, same images, same machine, same run */
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/data/pil_peer.py run %s %d %d",
             RT_SOURCE_DIR, dir, reps, size);
    FILE *pp = popen(cmd, "r");
    double pil[100];
    int np_ = 0;
    while (pp && np_ < reps && fscanf(pp, "%lf", &pil[np_]) == 1)
        np_++;
    if (!pp || pclose(pp) != 0 || np_ != reps)
        die("pil_peer.py run", "failed");
    double md = median(dec, reps), mr = median(resz, reps), mf = median(full, reps),
           mp = median(pil, reps);
    printf("JPEG 500x375 q90 -> %dx%d RGB, %d images (%.1f KiB each), 1 thread, median of %d\n",
           size, size, n, (double)raw / n / 1024, reps);
    printf("%-44s %12s %10s\n", "path", "images/s", "vs PIL");
    printf("%-44s %12.1f %9.2fx\n", "PIL loop: decode+resize+augment+normalise", mp, 1.0);
    printf("%-44s %12.1f %9.2fx\n", "rtrain: decode+resize+augment+normalise", mf, mf / mp);
    printf("%-44s %12.1f %9.2fx\n", "rtrain: decode+resize (8-bit, no augment)", mr, mr / mp);
    printf("%-44s %12.1f %9.2fx\n", "TurboJPEG decode alone (tjbench-style)", md, md / mp);
    if (dir == tmpl) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
        if (system(cmd) != 0)
            fprintf(stderr, "bench_image: could not remove %s\n", tmpl);
    }
    for (int i = 0; i < n; i++)
        free(b[i].p);
    free(b);
    free(small);
    free(x);
    return 0;
}
