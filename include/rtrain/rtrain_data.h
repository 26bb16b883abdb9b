/*
 * rtrain_data.h - uploading data as TensorFlow users have it: TFRecord
 * files of tf.train.Example (or SequenceExample) records, and JPEG/PNG
 * folders in the Keras image_dataset_from_directory layout. Files go up as
 * they are (compressed); the daemon parses and decodes them.
 *
 *     rt_client_example_spec *spec;
 *     char err[200];
 *     if (rt_client_example_spec_parse("image:jpeg,label:int64", NULL, &spec,
 *                                      err, sizeof err) < 0) ...
 *     rt_client_image_opts im = {.height = 224, .width = 224, .flip = 1};
 *     rt_client_example_spec_set_image(spec, &im);
 *     rt_client_dataset ds;
 *     rc = rt_client_upload_tfrecord_glob(c, sid, "train", "data/train-*.tfrecord",
 *                                         spec, &ds);
 *     rt_client_example_spec_free(spec);
 *
 *     // a folder of class subfolders: label = index of the sorted class name
 *     rc = rt_client_upload_image_folder(c, sid, "flowers", "flowers/", &im, 0, &ds);
 *
 * A feature spec is "key:kind[shape],...": kind int64, float, jpeg, png or
 * image (JPEG or PNG); shape "[4]" or "[10x4]" (values per record; none =
 * one value); a key starting with '@' reads a SequenceExample feature list
 * (shape (steps x values)). The label is label_key, else the key named
 * "label" or ending in "/label" (image/class/label) when there is one; two
 * such keys without label_key are an error naming both. Compression goes
 * by file name: *.gz GZIP,
 * *.zlib ZLIB, else none.
 */
#ifndef RTRAIN_DATA_CLIENT_H
#define RTRAIN_DATA_CLIENT_H

#include "rtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_client_example_spec rt_client_example_spec;

typedef struct rt_client_image_opts {
    int height, width;         /* the model's input size */
    int channels;              /* 1 or 3; 0 = 3 */
    int resize;                /* 0 auto (area down, bilinear up), 1 bilinear, 2 area */
    int n_mean, n_std;         /* 0, 1 or channels values below */
    float mean[3], std[3];     /* (pixel / 255 - mean) / std */
    int crop_pad;              /* training augmentation, see proto ImageSpec */
    int flip;
    float brightness, contrast;
    int storage;               /* image folders: RT_STORAGE_* below */
    uint64_t shuffle_buffer;   /* image folders, streamed: 0 = the daemon's */
} rt_client_image_opts;

/* Where the daemon keeps the decoded samples (proto Storage): AUTO streams
 * a dataset whose decoded size is over the daemon's --stream-above; STREAM
 * spools the records to the daemon's disk and decodes them per batch on
 * worker threads, shuffled through a buffer of shuffle_buffer samples
 * (0 = the daemon's --shuffle-buffer); MEMORY decodes all of it once. */
enum { RT_STORAGE_AUTO = 0, RT_STORAGE_MEMORY = 1, RT_STORAGE_STREAM = 2 };

/* Parse a spec. *out is owned by the caller (rt_client_example_spec_free).
 * RT_EINVAL with a message naming the entry. */
int rt_client_example_spec_parse(const char *features, const char *label_key,
                                 rt_client_example_spec **out, char *err, size_t errlen);
void rt_client_example_spec_free(rt_client_example_spec *s); /* NULL is a no-op */
void rt_client_example_spec_set_image(rt_client_example_spec *s, const rt_client_image_opts *o);
/* 1: bad records are skipped and counted (out->records_skipped); 0: fail. */
void rt_client_example_spec_set_skip_bad(rt_client_example_spec *s, int skip);
/* storage: RT_STORAGE_*; RT_EINVAL for another value. */
int rt_client_example_spec_set_storage(rt_client_example_spec *s, int storage,
                                       uint64_t shuffle_buffer);
/* Records are SequenceExamples (set by an '@' key too). */
void rt_client_example_spec_set_sequence(rt_client_example_spec *s, int on);

/* TFRecord shards (1..256), in order, as one dataset. Deduplicated like
 * rt_client_upload_parts: a re-run of the same files sends nothing. */
int rt_client_upload_tfrecord(rt_client *c, const char *session, const char *name,
                              const char *const *paths, size_t n_paths,
                              const rt_client_example_spec *spec, rt_client_dataset *out);
/* The files matching a glob pattern, sorted by name. */
int rt_client_upload_tfrecord_glob(rt_client *c, const char *session, const char *name,
                                   const char *pattern, const rt_client_example_spec *spec,
                                   rt_client_dataset *out);
/* dir/CLASS/NAME.jpg, .jpeg or .png: classes sorted by name are labels 0, 1, ...
 * (as Keras numbers them). The files are framed as TFRecord records of
 * {"image": bytes, "label": int64} in memory, untouched, and uploaded. */
int rt_client_upload_image_folder(rt_client *c, const char *session, const char *name,
                                  const char *dir, const rt_client_image_opts *img,
                                  int skip_bad, rt_client_dataset *out);

/* The records of TFRecord shards (a glob; .gz and .zlib shards inflated
 * here) or of an image folder (framed as above) as rows for
 * rt_client_fit_rows, read into memory here: each chunk is its records as
 * one uncompressed TFRecord part, read by the daemon as the files are.
 * spec must outlive *out. */
/* A data file's bytes, inflated when it is compressed (gzip, any number
 * of members, by its magic or a .gz name; zlib by a .zlib name), as the
 * daemon inflates a gzip'ed IDX or a compressed TFRecord shard: *data
 * malloc'ed (free()), *len its bytes. 0, or an RT_ code with the reason in
 * err. */
int rt_client_read_data_file(const char *path, void **data, size_t *len, char *err,
                             size_t errlen);
typedef struct rt_client_record_rows rt_client_record_rows;
int rt_client_tfrecord_rows(rt_client *c, const char *pattern, const rt_client_example_spec *spec,
                            rt_client_record_rows **out, rt_client_rows *rows);
int rt_client_image_folder_rows(rt_client *c, const char *dir, const rt_client_image_opts *img,
                                int skip_bad, rt_client_record_rows **out, rt_client_rows *rows);
void rt_client_record_rows_free(rt_client_record_rows *r);

#ifdef __cplusplus
}
#endif
#endif
