/* cli_ckpt.c - moving training to another daemon: `rtrain checkpoint pull`
 * and `push`, and fit's --save-state / --load-state. A state file is the
 * daemon's checkpoint as it is (its own XXH3 checksum inside), so a pushed
 * state is checked by the daemon that takes it. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_state_pull(rt_client *c, const char *sid, const char *program, const char *path)
{
    rt_client_ckpt_info in;
    int rc = rt_client_checkpoint(c, sid, program, RT_CKPT_PULL, &in);
    if (rc < 0)
        return cli_fail(c, "Checkpoint (pull)", rc);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(in.state, 1, in.state_len, f) == in.state_len;
    if (f && fclose(f) != 0)
        ok = 0;
    free(in.state);
    if (!ok) {
        fprintf(stderr, "rtrain: cannot write %s: %s\n", path, strerror(errno));
        return CLI_EXIT_INVALID;
    }
    fprintf(stderr, "state: %s (%zu bytes, step %llu)\n", path, in.state_len,
            (unsigned long long)in.global_step);
    return 0;
}

int cli_state_push(rt_client *c, const char *sid, const char *path, char *program_out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "rtrain: cannot read %s: %s\n", path, strerror(errno));
        return CLI_EXIT_INVALID;
    }
    unsigned char *b = NULL;
    size_t n = 0, cap = 0, k;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            unsigned char *nb = realloc(b, cap);
            if (!nb) {
                free(b);
                fclose(f);
                fprintf(stderr, "rtrain: %s: out of memory\n", path);
                return CLI_EXIT_OTHER;
            }
            b = nb;
        }
        if ((k = fread(b + n, 1, cap - n, f)) == 0)
            break;
        n += k;
    }
    fclose(f);
    rt_client_ckpt_info in;
    int rc = rt_client_restore_checkpoint(c, sid, b, n, program_out, &in);
    free(b);
    if (rc < 0)
        return cli_fail(c, "RestoreCheckpoint", rc);
    fprintf(stderr, "state: %s resumed as program %s at step %llu\n", path, program_out,
            (unsigned long long)in.global_step);
    return 0;
}

int cli_cmd_checkpoint(const cli_opts *o)
{
    rt_client *c = NULL;
    int ex = cli_connect(o, &c);
    if (ex)
        return ex;
    if (o->cmd == CLI_CKPT_PULL) {
        rt_client_set_session_token(c, o->pos[0], o->session_token);
        ex = cli_state_pull(c, o->pos[0], o->program, o->pos[1]);
    } else {
        char sid[RT_ID_MAX], pid[RT_ID_MAX];
        int rc = rt_client_session_create(c, "rtrain checkpoint push", sid);
        if (rc < 0) {
            ex = cli_fail(c, "CreateSession", rc);
        } else if ((ex = cli_state_push(c, sid, o->pos[0], pid)) == 0) {
            printf("session %s\ntoken %s\nprogram %s\n", sid, rt_client_session_token(c, sid), pid);
        }
    }
    cli_active_client = NULL;
    rt_client_destroy(c);
    return ex;
}
