/* rt_statedir.c - the state directory itself (rt_state.h): opening it,
 * its subdirectories, and its files written atomically and read back, one
 * name at a time under the directory's descriptors. Sessions and datasets
 * are rt_state.c's, checkpoints rt_ckpt.c's; both use these. */
#include "rt_state.h"
#include "rt_state_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <xxhash.h>

#include "rt_log.h"
#include "rt_obs.h"
#include "rt_wire.h"

static int mkdir_p(const char *path)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* The folder must be this daemon's alone: another user, or anyone in a
 * group, who may write in it could place links there or replace files. */
static int check_owner(const char *what, int fd, char *err, size_t errlen)
{
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        snprintf(err, errlen, "--state-dir: cannot stat %s: %s", what, strerror(errno));
        return RT_EIO;
    }
    if (sb.st_uid != geteuid()) {
        snprintf(err, errlen,
                 "--state-dir: %s is owned by uid %u, not by this daemon's uid %u: "
                 "chown it to the daemon's user",
                 what, (unsigned)sb.st_uid, (unsigned)geteuid());
        return RT_EINVAL;
    }
    if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen,
                 "--state-dir: %s is writable by its group or others (mode %04o): "
                 "chmod 0700 it",
                 what, (unsigned)(sb.st_mode & 07777));
        return RT_EINVAL;
    }
    return 0;
}

/* name in dfd as a folder, created if missing (create), never through a
 * symlink: an fd, or -1 with errno (ELOOP or ENOTDIR: not a folder). */
int rt__state_dir_at(int dfd, const char *name, int create)
{
    if (create && mkdirat(dfd, name, 0700) < 0 && errno != EEXIST)
        return -1;
    return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int rt_state_open(const rt_state_config *cfg, rt_state **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg->dir || !*cfg->dir || strlen(cfg->dir) > 400) {
        snprintf(err, errlen, "--state-dir must be a path of 1 to 400 bytes");
        return RT_EINVAL;
    }
    rt_state *st = calloc(1, sizeof *st);
    if (!st)
        return RT_ENOMEM;
    st->cfg = *cfg;
    st->root = st->ds = st->ss = -1;
    snprintf(st->dir, sizeof st->dir, "%s", cfg->dir);
    st->cfg.dir = st->dir;
    if (st->cfg.keep < 1)
        st->cfg.keep = 3;
    int rc = RT_EIO;
    /* The operator's path is followed (it may be a link to a volume);
     * what is below it never is. */
    if (mkdir_p(st->dir) < 0 ||
        (st->root = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "--state-dir: cannot create %s: %s", st->dir, strerror(errno));
        goto fail;
    }
    if ((rc = check_owner(st->dir, st->root, err, errlen)) < 0)
        goto fail;
    const char *subs[] = {"datasets", "sessions"};
    int *fds[] = {&st->ds, &st->ss};
    for (int i = 0; i < 2; i++) {
        char what[600];
        snprintf(what, sizeof what, "%s/%s", st->dir, subs[i]);
        if ((*fds[i] = rt__state_dir_at(st->root, subs[i], 1)) < 0) {
            int e = errno;
            snprintf(err, errlen, "--state-dir: %s %s", what,
                     e == ELOOP || e == ENOTDIR ? "is not a folder (a symlink or a file): "
                                                  "move it away"
                                                : strerror(e));
            rc = e == ELOOP || e == ENOTDIR ? RT_EINVAL : RT_EIO;
            goto fail;
        }
        if ((rc = check_owner(what, *fds[i], err, errlen)) < 0)
            goto fail;
    }
    /* Writable? O_EXCL: a link or FIFO named .probe is not opened (one
     * left by an earlier start is removed: the name is ours). */
    int fd = -1;
    for (int k = 0; k < 2 && fd < 0; k++) {
        fd = openat(st->root, ".probe", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST && k == 0)
            unlinkat(st->root, ".probe", 0);
        else if (fd < 0)
            break;
    }
    if (fd < 0) {
        snprintf(err, errlen, "--state-dir: cannot write in %s: %s", st->dir, strerror(errno));
        rc = RT_EIO;
        goto fail;
    }
    close(fd);
    unlinkat(st->root, ".probe", 0);
    *out = st;
    return 0;
fail:
    rt_state_close(st);
    return rc;
}

void rt_state_close(rt_state *st)
{
    if (!st)
        return;
    int fds[] = {st->root, st->ds, st->ss};
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(st);
}

const rt_state_config *rt_state_cfg(const rt_state *st) { return &st->cfg; }

int rt_state_open_dir(const rt_state *st, const char *sid, const char *pid, int create)
{
    /* ids are "s-" / "p-" and a few safe characters: one name each */
    if (!sid || strncmp(sid, "s-", 2) || strchr(sid, '/') || strlen(sid) >= RT_SESSION_ID_LEN ||
        (pid && (strncmp(pid, "p-", 2) || strchr(pid, '/') || strlen(pid) >= RT_SESSION_ID_LEN))) {
        errno = EINVAL;
        return -1;
    }
    int sfd = rt__state_dir_at(st->ss, sid, create);
    if (sfd < 0 || !pid)
        return sfd;
    int pfd = rt__state_dir_at(sfd, pid, create);
    int e = errno;
    close(sfd);
    errno = e;
    return pfd;
}

DIR *rt_state_list(int dfd)
{
    /* a fresh open of the folder: a dup would share (and move) the
     * position of dfd's own description */
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d && fd >= 0)
        close(fd);
    return d;
}

int rt__state_io_err(int e, const char *what, const char *path, char *err, size_t errlen)
{
    int full = e == ENOSPC || e == EFBIG || e == EDQUOT;
    snprintf(err, errlen, "%s%s %s: %s", full ? "disk full: " : "", what, path, strerror(e));
    return full ? RT_ETOOBIG : RT_EIO;
}

int rt_state_write_at(const rt_state *st, int dfd, const char *name, const rt_exec_span *sp, int n,
                      char *err, size_t errlen)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    /* O_EXCL | O_NOFOLLOW: a link placed at the temporary name is not
     * written through; one left by a kill is ours to remove */
    int fd = -1;
    for (int k = 0; k < 2 && fd < 0; k++) {
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST && k == 0)
            unlinkat(dfd, tmp, 0);
        else if (fd < 0)
            break;
    }
    if (fd < 0)
        return rt__state_io_err(errno, "cannot create", tmp, err, errlen);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *p = sp[i].p;
        size_t left = sp[i].n;
        while (left) {
            /* at most 1 GiB per write: Linux caps one write anyway */
            ssize_t k = write(fd, p, left > (1u << 30) ? (1u << 30) : left);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                rc = rt__state_io_err(k < 0 ? errno : ENOSPC, "cannot write", tmp, err, errlen);
                break;
            }
            p += k;
            left -= (size_t)k;
        }
    }
    if (rc == 0 && !st->cfg.no_fsync && fsync(fd) < 0)
        rc = rt__state_io_err(errno, "cannot fsync", tmp, err, errlen);
    if (close(fd) < 0 && rc == 0)
        rc = rt__state_io_err(errno, "cannot close", tmp, err, errlen);
    /* renameat replaces a link at name, never what it points to */
    if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0)
        rc = rt__state_io_err(errno, "cannot rename", tmp, err, errlen);
    if (rc < 0) {
        unlinkat(dfd, tmp, 0);
        return rc;
    }
    /* the rename itself is durable only once the folder is */
    if (!st->cfg.no_fsync && fsync(dfd) < 0)
        rc = rt__state_io_err(errno, "cannot fsync the folder of", name, err, errlen);
    return rc;
}

int rt_state_read_at(int dfd, const char *name, uint64_t max, uint8_t **buf, size_t *len, char *err,
                     size_t errlen)
{
    *buf = NULL;
    *len = 0;
    /* O_NONBLOCK: a FIFO there would block the open until a writer came */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s", e == ELOOP ? "is a symlink" : strerror(e));
        return e == ENOENT ? RT_ENOTFOUND : RT_EIO;
    }
    struct stat sb;
    int rc = RT_EIO;
    if (fstat(fd, &sb) < 0) {
        snprintf(err, errlen, "cannot stat it: %s", strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "is not a regular file");
        rc = RT_EDATA;
    } else if ((uint64_t)sb.st_size > max) {
        snprintf(err, errlen, "is %llu bytes, over the %llu this file can be",
                 (unsigned long long)sb.st_size, (unsigned long long)max);
        rc = RT_ETOOBIG;
    } else if (!(*buf = malloc((size_t)sb.st_size + 1))) {
        snprintf(err, errlen, "no memory for its %llu bytes", (unsigned long long)sb.st_size);
        rc = RT_ENOMEM;
    } else {
        rc = rt_state_read_full(fd, *buf, (size_t)sb.st_size, err, errlen);
        if (rc == 0) {
            (*buf)[sb.st_size] = 0;
            *len = (size_t)sb.st_size;
        } else {
            free(*buf);
            *buf = NULL;
        }
    }
    close(fd);
    return rc;
}

int rt_state_read_full(int fd, void *dst, size_t n, char *err, size_t errlen)
{
    uint8_t *p = dst;
    while (n) {
        ssize_t k = read(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0) {
            snprintf(err, errlen, "%s", k < 0 ? strerror(errno) : "shorter than its size");
            return RT_EIO;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}
