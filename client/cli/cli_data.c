/* cli_data.c - `--data` as TensorFlow users have it: TFRecord files (one,
 * or shards by a glob) read under --features, and JPEG/PNG class folders;
 * the image options that go with them. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "rtrain/rtrain_data.h"

int cli_is_glob(const char *p) { return p && strpbrk(p, "*?[") != NULL; }

int cli_is_dir(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcasecmp(s + n - m, suf) == 0;
}

cli_data_kind cli_data_kind_of(const char *path)
{
    if (!path || !*path)
        return CLI_DATA_UNKNOWN;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    if (cli_is_dir(path))
        return CLI_DATA_IMAGES;
    if (ends_with(tmp, ".zlib"))
        tmp[strlen(tmp) - 5] = 0;
    if (ends_with(tmp, ".tfrecord") || ends_with(tmp, ".tfrec") || cli_is_glob(tmp))
        return CLI_DATA_TFRECORD;
    if (ends_with(tmp, ".gz"))
        tmp[strlen(tmp) - 3] = 0;
    if (ends_with(tmp, ".tfrecord") || ends_with(tmp, ".tfrec"))
        return CLI_DATA_TFRECORD;
    if (ends_with(tmp, ".csv"))
        return CLI_DATA_CSV;
    if (ends_with(tmp, ".npy"))
        return CLI_DATA_NPY;
    if (ends_with(tmp, ".idx") || ends_with(tmp, "-ubyte") || ends_with(tmp, ".idx1") ||
        ends_with(tmp, ".idx3") || strstr(tmp, "-idx1-") || strstr(tmp, "-idx3-"))
        return CLI_DATA_IDX;
    return CLI_DATA_UNKNOWN;
}

/* "a,b,c" into up to 3 floats; returns the count or -1. */
static int floats3(const char *s, float v[3])
{
    int n = 0;
    while (s && *s && n < 3) {
        char *e;
        double d = strtod(s, &e);
        if (e == s)
            return -1;
        v[n++] = (float)d;
        s = *e == ',' ? e + 1 : e;
        if (*e && *e != ',')
            return -1;
    }
    return s && *s ? -1 : n;
}

/* The image the compiled model takes (0: none known yet, or its input is
 * no image): images are decoded to it unless --image-size/--channels say
 * otherwise, so a 24x24 CNN gets 24x24 images. */
static int cli_model_h, cli_model_w, cli_model_c;

void cli_set_model_input(const int64_t *shape, int ndim, int nchw)
{
    cli_model_h = cli_model_w = cli_model_c = 0;
    if (ndim != 3)
        return;
    const int64_t h = nchw ? shape[1] : shape[0], w = nchw ? shape[2] : shape[1],
                  ch = nchw ? shape[0] : shape[2];
    if (h < 1 || w < 1 || h > 8192 || w > 8192 || (ch != 1 && ch != 3))
        return;
    cli_model_h = (int)h;
    cli_model_w = (int)w;
    cli_model_c = (int)ch;
}

int cli_image_opts(const cli_opts *o, rt_client_image_opts *im, char *err, size_t errlen)
{
    memset(im, 0, sizeof *im);
    im->height = im->width = 256; /* Keras image_dataset_from_directory's default */
    if (cli_model_h) {
        im->height = cli_model_h;
        im->width = cli_model_w;
    }
    if (o->image_size) {
        char *e;
        long h = strtol(o->image_size, &e, 10), w = h;
        if (*e == 'x')
            w = strtol(e + 1, &e, 10);
        if (*e || h < 1 || w < 1 || h > 8192 || w > 8192)
            return perr(err, errlen, "--image-size: expected HxW (e.g. 224x224), got '%s'",
                        o->image_size);
        im->height = (int)h;
        im->width = (int)w;
    }
    im->channels = o->channels > 0 ? (int)o->channels : cli_model_c ? cli_model_c : 3;
    if (o->resize) {
        if (!strcmp(o->resize, "auto"))
            im->resize = 0;
        else if (!strcmp(o->resize, "bilinear"))
            im->resize = 1;
        else if (!strcmp(o->resize, "area"))
            im->resize = 2;
        else
            return perr(err, errlen, "--resize: auto, bilinear or area, not '%s'", o->resize);
    }
    if (o->mean && (im->n_mean = floats3(o->mean, im->mean)) < 1)
        return perr(err, errlen, "--mean: expected 1 or 3 numbers, got '%s'", o->mean);
    if (o->std && (im->n_std = floats3(o->std, im->std)) < 1)
        return perr(err, errlen, "--std: expected 1 or 3 numbers, got '%s'", o->std);
    if (o->augment) {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", o->augment);
        for (char *t = strtok(tmp, ","); t; t = strtok(NULL, ",")) {
            char *eq = strchr(t, '=');
            double v = eq ? strtod(eq + 1, NULL) : 0;
            if (eq)
                *eq = 0;
            if (!strcmp(t, "flip") && !eq)
                im->flip = 1;
            else if (!strcmp(t, "crop") && eq && v >= 1 && v <= 1024)
                im->crop_pad = (int)v;
            else if (!strcmp(t, "brightness") && eq && v > 0 && v <= 1)
                im->brightness = (float)v;
            else if (!strcmp(t, "contrast") && eq && v > 0 && v <= 1)
                im->contrast = (float)v;
            else
                return perr(err, errlen,
                            "--augment: expected flip, crop=PIXELS, "
                            "brightness=X, contrast=X (X in (0, 1]), got '%s'",
                            o->augment);
        }
    }
    return 0;
}

int cli_data_check(const cli_opts *o, cli_data_kind k, char *err, size_t errlen)
{
    rt_client_image_opts im;
    if (cli_image_opts(o, &im, err, errlen) < 0)
        return -1;
    if (o->on_bad_record && strcmp(o->on_bad_record, "fail") && strcmp(o->on_bad_record, "skip"))
        return perr(err, errlen, "--on-bad-record: fail or skip, not '%s'", o->on_bad_record);
    if (k == CLI_DATA_TFRECORD) {
        if (!o->features)
            return perr(err, errlen,
                        "TFRecord data needs --features (e.g. image:jpeg,label:int64)");
        rt_client_example_spec *s;
        if (rt_client_example_spec_parse(o->features, o->label_key, &s, err, errlen) < 0)
            return -1;
        rt_client_example_spec_free(s);
    }
    return 0;
}

int cli_upload_tf(rt_client *c, const char *sid, const char *name, const char *data,
                  const cli_opts *o, rt_client_dataset *out)
{
    rt_client_image_opts im;
    char err[256];
    if (cli_image_opts(o, &im, err, sizeof err) < 0) {
        fprintf(stderr, "rtrain: %s\n", err);
        return RT_EINVAL;
    }
    if (data == o->val) {
        /* validation sees plain images; without augmentation the daemon
         * keeps no 8-bit copy for it */
        im.crop_pad = im.flip = 0;
        im.brightness = im.contrast = 0;
    }
    int skip = o->on_bad_record && !strcmp(o->on_bad_record, "skip");
    im.storage = !o->storage || !strcmp(o->storage, "auto") ? RT_STORAGE_AUTO
                 : !strcmp(o->storage, "memory")            ? RT_STORAGE_MEMORY
                                                            : RT_STORAGE_STREAM;
    im.shuffle_buffer = (uint64_t)o->shuffle_buffer;
    int rc;
    if (cli_data_kind_of(data) == CLI_DATA_IMAGES) {
        rc = rt_client_upload_image_folder(c, sid, name, data, &im, skip, out);
    } else {
        rt_client_example_spec *s;
        if (rt_client_example_spec_parse(o->features, o->label_key, &s, err, sizeof err) < 0) {
            fprintf(stderr, "rtrain: --features: %s\n", err);
            return RT_EINVAL;
        }
        rt_client_example_spec_set_image(s, &im);
        rt_client_example_spec_set_skip_bad(s, skip);
        rt_client_example_spec_set_storage(s, im.storage, im.shuffle_buffer);
        rc = rt_client_upload_tfrecord_glob(c, sid, name, data, s, out);
        rt_client_example_spec_free(s);
    }
    if (rc == 0)
        fprintf(stderr, "rtrain: %s: %llu samples, %llu bytes sent%s%s\n", name,
                (unsigned long long)out->samples, (unsigned long long)out->bytes_sent,
                out->deduplicated ? " (already on the daemon)" : "",
                out->streamed ? ", streamed from the daemon's disk" : "");
    if (rc == 0 && out->records_skipped)
        fprintf(stderr, "rtrain: %s: skipped %llu bad record(s); first: %s\n", name,
                (unsigned long long)out->records_skipped, out->first_skipped);
    return rc;
}
