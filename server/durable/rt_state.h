/*
 * rt_state.h - the daemon's state directory (--state-dir): sessions,
 * datasets and checkpoints on disk, and their restore at start.
 *
 * Layout under DIR:
 *
 *     datasets/<key>.data          an upload's bytes and how to parse them,
 *                                  content-addressed (the store key, XXH3-128)
 *     datasets/<key>-<owner>.meta  who uploaded it, under which id
 *     sessions/<sid>/session       id, token, owner, name
 *     sessions/<sid>/<pid>/ckpt-<n>.rtck
 *                                  checkpoints of one program, newest = largest
 *                                  n; each holds the model (the Compile
 *                                  request), the program's counters and the
 *                                  exec's full state (rt_exec_state_spans)
 *
 * Every file is written atomically: a temporary file, fsync, rename, fsync
 * of the directory. A checkpoint ends with the XXH3-64 of what precedes it,
 * so a torn or corrupted one is detected; the loader then takes the
 * previous one and logs a warning. The last `keep` checkpoints stay.
 *
 * The folder is opened, never followed: DIR must be owned by the daemon's
 * user and writable by nobody else (else the start is refused); below it
 * every name is opened from a directory fd with O_NOFOLLOW (O_NONBLOCK for
 * reads), only regular files are read, each after fstat shows its size
 * within the file's limit, and only the daemon's own names that are
 * regular files are removed. A symlink, FIFO, device or oversized file
 * found there is logged and left alone.
 *
 *     rt_state_config sc = {.dir = "/var/lib/rtrain", .keep = 3};
 *     rt_state *st;
 *     if (rt_state_open(&sc, &st, err, sizeof err) < 0) ...
 *     rt_state_session_save(st, sess);                 // CreateSession
 *     rt_state_checkpoint(st, sess->id, prog, NULL, err, sizeof err);
 *     rt_state_close(st);
 *
 * Threads: writes of one program's checkpoints happen under the device lock
 * (the exec must not change while it is written); the rest is per file and
 * needs no lock. Nothing here holds a lock across a call.
 */
#ifndef RTRAIN_STATE_H
#define RTRAIN_STATE_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>

#include "rt_data.h"
#include "rt_session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_state_config {
    const char *dir;
    uint32_t every_steps;    /* checkpoint after a call once this many steps ran; 0 = off */
    uint32_t every_s;        /* ... or once this many seconds passed; 0 = off */
    int keep;                /* checkpoints kept per program; < 1 = 3 */
    int fail_continue;       /* a failed checkpoint is logged; training goes on */
    int no_fsync;            /* benchmarks only: skip fsync (not crash-safe) */
    uint64_t max_file_bytes; /* a checkpoint read at start: larger ones are
                                refused before reading; 0 = 64 GiB */
} rt_state_config;

typedef struct rt_state rt_state;

/* Create DIR (and its subfolders) if needed. RT_EIO with a message if it
 * cannot be created or written; RT_EINVAL if it (or datasets/, sessions/)
 * is not the daemon's alone: owned by another user, writable by its group
 * or others, or (below DIR) a symlink. */
int rt_state_open(const rt_state_config *cfg, rt_state **out, char *err, size_t errlen);
void rt_state_close(rt_state *st); /* NULL is a no-op */
const rt_state_config *rt_state_cfg(const rt_state *st);

/* sessions/<sid> (pid NULL) or sessions/<sid>/<pid>, created first if
 * create; never through a symlink. An fd (the caller closes it), or -1
 * with errno (ELOOP or ENOTDIR: something else is at that name). */
int rt_state_open_dir(const rt_state *st, const char *sid, const char *pid, int create);
/* A listing of the folder dfd (from its start; dfd stays open). */
DIR *rt_state_list(int dfd);

/* name in the folder dfd written atomically from n spans (temp, fsync,
 * rename, fsync of the folder); a link at either name is replaced, never
 * written through. On error (disk full: RT_ETOOBIG; else RT_EIO) the
 * message names the file and the reason, the temporary file is removed
 * and what was at name before is unchanged. */
int rt_state_write_at(const rt_state *st, int dfd, const char *name, const rt_exec_span *sp, int n,
                      char *err, size_t errlen);
/* name in the folder dfd into *buf (malloc'ed, NUL-terminated): a regular
 * file of at most max bytes, checked before anything is read. RT_ENOTFOUND
 * if missing; RT_EDATA (not a regular file: a symlink, FIFO, device),
 * RT_ETOOBIG (over max) or RT_EIO otherwise, err saying which. */
int rt_state_read_at(int dfd, const char *name, uint64_t max, uint8_t **buf, size_t *len, char *err,
                     size_t errlen);
/* Read exactly n bytes of fd (EINTR retried); RT_EIO if it ends first. */
int rt_state_read_full(int fd, void *dst, size_t n, char *err, size_t errlen);

/* --------------------------------------------------------------- sessions */
int rt_state_session_save(const rt_state *st, const rt_session *s, char *err, size_t errlen);
/* Remove the session's folder: its record, program folders and their
 * checkpoints; anything else found there (a symlink in their place
 * included) is left, with a warning. */
void rt_state_session_remove(const rt_state *st, const char *sid);

/* --------------------------------------------------------------- datasets */
/* The bytes of a completed upload, before it is parsed and acknowledged:
 * datasets/<key>.data, unless a file with this key is there already.
 * TFRecord uploads keep their shards' compression and feature spec
 * beside the parts (RTDATA2), so a restarted daemon parses them as they
 * were; one without a spec is not kept: returns 0 and sets *kept = 0. */
int rt_state_dataset_put(const rt_state *st, const uint8_t key[16], const uint8_t hash[16],
                         const rt_data_part *parts, int n_parts, const uint8_t *buf, uint64_t len,
                         int *kept, char *err, size_t errlen);
/* Who owns the stored dataset ds and under which id (after the store took
 * it, before the upload is acknowledged). */
int rt_state_dataset_owner(const rt_state *st, const rt_dataset *ds, const char *owner,
                           const char *name, char *err, size_t errlen);

/* ------------------------------------------------------------ checkpoints */
/* The program's counters kept beside its exec state. */
typedef struct rt_ckpt_meta {
    char magic[8]; /* "RTMETA2" */
    char session_id[RT_SESSION_ID_LEN];
    char program_id[RT_SESSION_ID_LEN];
    uint64_t last_seq;
    int64_t fit_epochs;
    uint64_t epoch_exec_ns;
    rt_metrics last_metrics, last_mean;
    rt_seq_rec ring[RT_SEQ_RING];
    rt_fit_rec fit;        /* the resumable Fit */
    uint64_t n_fit_epochs; /* its epoch results that follow the record */
} rt_ckpt_meta;

/* A checkpoint's parts, pointing into the bytes it was parsed from. */
typedef struct rt_ckpt_view {
    const uint8_t *req; /* the CompileRequest, packed */
    size_t req_len;
    rt_ckpt_meta meta;
    const uint8_t *fit_epochs; /* meta.n_fit_epochs rt_fit_epoch, unaligned */
    const uint8_t *exec;       /* rt_exec_load_state's blob */
    size_t exec_len;
} rt_ckpt_view;

/* Check a checkpoint's framing and checksum and split it. RT_ECHECKSUM or
 * RT_EDATA with a message when it is torn or corrupt. */
int rt_ckpt_parse(const uint8_t *buf, size_t len, rt_ckpt_view *v, char *err, size_t errlen);
/* The size of p's checkpoint and its bytes into buf (for a pull). */
size_t rt_ckpt_size(const rt_program *p);
int rt_ckpt_build(const char *sid, const rt_program *p, uint8_t *buf, size_t len);
/* Apply a parsed checkpoint's counters and Fit record to p (its exec is
 * loaded apart). */
void rt_ckpt_apply_meta(rt_program *p, const rt_ckpt_view *v);
/* Apply a checkpoint loaded into p in place (RestoreCheckpoint with a
 * program_id; p's exec is loaded apart): the state's Fit epoch count and
 * epoch time. p's RunSteps records (last_seq, their answers, the pipeline
 * marks) stay p's: seq numbers are the client's, which goes on numbering
 * its calls on p after the push, while the state's are another timeline's
 * (an older one of p, or another program's) and a seq at or below them
 * would be taken for a replay and skipped. The resumable Fit is forgotten
 * (both the state's and p's ran on other weights), as a new program's is
 * (rt_program_forget_client). p is at a call boundary again, and marked
 * changed since its newest checkpoint. */
void rt_ckpt_apply_meta_into(rt_program *p, const rt_ckpt_view *v);

/* Write p's checkpoint now (its exec must not change meanwhile: the caller
 * holds the device), and remove all but the newest keep. */
int rt_state_checkpoint(const rt_state *st, const char *sid, rt_program *p, char *err,
                        size_t errlen);
/* Remove a program's checkpoints and its folder: the program of a call
 * that failed after its first checkpoint, whose id reached nobody. */
void rt_state_program_remove(const rt_state *st, const char *sid, const char *pid);
/* Whether a call that just ran must write one: asked for, or the interval
 * (per call, else the daemon's) is over. */
int rt_state_checkpoint_due(const rt_state *st, const rt_program *p, uint32_t every_steps,
                            uint32_t every_s);

/* --------------------------------------------------------------- restore */
/* How rt_state_restore rebuilds a program: compile the model of req for
 * session s under id pid, into *out (the caller's hook into the compile
 * path). */
typedef int (*rt_state_compile_fn)(void *ud, rt_session *s, const uint8_t *req, size_t len,
                                   const char *pid, rt_program **out, char *err, size_t errlen);

typedef struct rt_state_restore_result {
    int sessions, programs, datasets, warnings;
} rt_state_restore_result;

/* Datasets into store, sessions into table with their programs at their
 * newest valid checkpoint. Owners are found in ps by name; what cannot be
 * restored (a missing owner, a corrupt file, a quota) is logged and left
 * on disk. */
int rt_state_restore(const rt_state *st, rt_session_table *table, rt_data_store *store,
                     rt_principal_set *ps, uint64_t max_dataset_bytes, rt_state_compile_fn compile,
                     void *ud, rt_state_restore_result *res);

#ifdef __cplusplus
}
#endif
#endif
