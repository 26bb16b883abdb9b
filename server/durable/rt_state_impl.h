/* rt_state_impl.h - the state directory's struct and the helpers its
 * files share (rt_statedir.c, rt_state.c); server/durable only. */
#ifndef RTRAIN_STATE_IMPL_H
#define RTRAIN_STATE_IMPL_H

#include <stddef.h>

#include "rt_state.h"

struct rt_state {
    rt_state_config cfg;
    char dir[512];
    /* Everything under the state dir is reached from these, opened at
     * start, one name at a time with O_NOFOLLOW (rt_state_open_dir,
     * rt_state_read_at, rt_state_write_at): a symlink, FIFO or device
     * placed there is never followed, opened for writing or read. */
    int root, ds, ss; /* the dir, datasets/, sessions/ */
};

/* The subdirectory name of dfd (O_NOFOLLOW), created first when create;
 * a descriptor or -1 with errno. */
int rt__state_dir_at(int dfd, const char *name, int create);
/* err = "[disk full: ]<what> <path>: <strerror(e)>"; returns RT_ETOOBIG
 * when the disk is full, else RT_EIO. */
int rt__state_io_err(int e, const char *what, const char *path, char *err, size_t errlen);

#endif
