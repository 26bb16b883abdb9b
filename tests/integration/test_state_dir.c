/*
 * test_state_dir.c - a hostile --state-dir against a real rtraind: the
 * daemon opens what is there, never follows it.
 *   - a state dir writable by its group or by everyone, or owned by another
 *     user, and a datasets/ that is a symlink to a folder elsewhere: the
 *     start is refused with a message naming the problem, nothing written;
 *   - a symlink at sessions/s-... to a folder elsewhere (no session record:
 *     what a close cut short by a kill leaves, which the start finishes),
 *     a FIFO as a dataset file, a session record and a checkpoint, a FIFO
 *     and a symlink to a file elsewhere named .probe, and 8 GiB sparse
 *     dataset and checkpoint files: the daemon starts (within the harness's
 *     30 s), serves, its peak RSS stays under 512 MiB (nothing was read
 *     whole), and every file outside the state dir is intact;
 *   - while it runs: a session's folder replaced by a symlink to a folder
 *     elsewhere, then CloseSession; a symlink planted at a checkpoint's
 *     temporary name, then Checkpoint{save}: the files elsewhere are
 *     intact, the checkpoint is written.
 * Before the fix the symlinked session's target lost its files at start and
 * on CloseSession, the FIFO hung the start, the sparse files were read
 * whole, and the links at .probe and the temporary name were written
 * through.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "itest.h"

#define FREE(p) ((p) ? protobuf_c_message_free_unpacked(&(p)->base, NULL) : (void)0)

static const char *RTRAIND;
static char TMP[256];

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void pathf(char *out, size_t n, const char *fmt, const char *a, const char *b)
{
    snprintf(out, n, fmt, a, b);
}

/* A folder elsewhere with two files, and the check that both are intact. */
static void outside_make(const char *dir)
{
    char p[512];
    mkdir(dir, 0700);
    pathf(p, sizeof p, "%s/%s", dir, "a.txt");
    put(p, "keep me a\n");
    pathf(p, sizeof p, "%s/%s", dir, "b.txt");
    put(p, "keep me b\n");
}

static int same(const char *path, const char *text)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strcmp(buf, text) == 0;
}

static void outside_check(const char *dir, const char *what)
{
    char p[512];
    pathf(p, sizeof p, "%s/%s", dir, "a.txt");
    CHECK(same(p, "keep me a\n"), "%s: %s was deleted or changed", what, p);
    pathf(p, sizeof p, "%s/%s", dir, "b.txt");
    CHECK(same(p, "keep me b\n"), "%s: %s was deleted or changed", what, p);
}

static void fresh_state(const char *st)
{
    char p[512];
    mkdir(st, 0700);
    pathf(p, sizeof p, "%s/%s", st, "datasets");
    mkdir(p, 0700);
    pathf(p, sizeof p, "%s/%s", st, "sessions");
    mkdir(p, 0700);
}

/* A fresh state dir TMP/name, and two folders elsewhere with their files
 * (paths of 300 bytes). */
static void setup(const char *name, char *st, const char *o1, char *out1, const char *o2,
                  char *out2)
{
    snprintf(st, 300, "%s/%s", TMP, name);
    fresh_state(st);
    snprintf(out1, 300, "%s/%s", TMP, o1);
    outside_make(out1);
    snprintf(out2, 300, "%s/%s", TMP, o2);
    outside_make(out2);
}

/* rtraind --state-dir st, expected to refuse: its exit code, stderr in err.
 * timeout(1) bounds a daemon that would start instead. */
static int refused(const char *st, char *err, size_t len)
{
    const char *args[] = {"timeout", "20", RTRAIND, "--listen", "127.0.0.1:0", "--state-dir",
                          st, NULL};
    return itest_run_capture("/usr/bin/timeout", args, err, len);
}

static void test_refused(void)
{
    char st[300], err[2048], p[512], out[300];
    snprintf(st, sizeof st, "%s/perm", TMP);
    fresh_state(st);
    chmod(st, 0777);
    int rc = refused(st, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "writable by its group or others"),
          "world-writable: exit %d, %s", rc, err);
    chmod(st, 0770);
    rc = refused(st, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "mode 0770") && strstr(err, "chmod 0700"),
          "group-writable: exit %d, %s", rc, err);
    chmod(st, 0700);
    pathf(p, sizeof p, "%s/%s", st, "sessions");
    chmod(p, 0775);
    rc = refused(st, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "sessions is writable"), "sessions/ 0775: exit %d, %s", rc,
          err);
    chmod(p, 0700);

    /* owned by another user: as root, a folder given to nobody; else one
     * root owns */
    char other[300];
    snprintf(other, sizeof other, "%s/other", TMP);
    if (geteuid() == 0) {
        mkdir(other, 0700);
        CHECK(chown(other, 65534, 65534) == 0, "chown: %s", strerror(errno));
    } else {
        snprintf(other, sizeof other, "/");
    }
    rc = refused(other, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "is owned by uid") && strstr(err, "chown"),
          "another owner: exit %d, %s", rc, err);
    if (geteuid() == 0) {
        DIR *d = opendir(other);
        int n = 0;
        struct dirent *e;
        while (d && (e = readdir(d)))
            n += e->d_name[0] != '.';
        if (d)
            closedir(d);
        CHECK(n == 0, "the refused dir got %d entries", n);
    }

    /* datasets/ is a symlink to a folder elsewhere */
    snprintf(st, sizeof st, "%s/dslink", TMP);
    mkdir(st, 0700);
    snprintf(out, sizeof out, "%s/out-dslink", TMP);
    outside_make(out);
    pathf(p, sizeof p, "%s/%s", st, "datasets");
    CHECK(symlink(out, p) == 0, "symlink");
    rc = refused(st, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "datasets is not a folder"), "datasets link: exit %d, %s", rc,
          err);
    outside_check(out, "datasets link");
}

static uint64_t vm_hwm_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    uint64_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = strtoull(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

static void sparse(const char *path, const void *head, size_t hl, off_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0, "cannot create %s", path);
    if (fd < 0)
        return;
    CHECK(write(fd, head, hl) == (ssize_t)hl, "write %s", path);
    CHECK(ftruncate(fd, size) == 0, "ftruncate %s: %s", path, strerror(errno));
    close(fd);
}

/* The head of a dataset file (rt_state.c's ds_head). */
typedef struct {
    char magic[8];
    uint8_t hash[16];
    uint32_t n_parts, pad;
    uint64_t len;
} ds_head;

static void test_hostile_start(void)
{
    char st[300], out[300], out2[300], p[700], q[700];
    setup("hostile", st, "out-start", out, "out-probe", out2);
    /* a symlink where a session's folder is, without a session record */
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000001");
    CHECK(symlink(out, p) == 0, "symlink");
    /* .probe, the daemon's write test, a link to a file elsewhere */
    pathf(p, sizeof p, "%s/%s", st, ".probe");
    pathf(q, sizeof q, "%s/%s", out2, "a.txt");
    CHECK(symlink(q, p) == 0, "symlink");
    /* FIFOs: a dataset file, a session record, a checkpoint */
    const char *key = "0123456789abcdef0123456789abcdef";
    char rec[300];
    pathf(p, sizeof p, "%s/datasets/%s.data", st, key);
    CHECK(mkfifo(p, 0600) == 0, "mkfifo");
    snprintf(rec, sizeof rec, "rtrain-dataset 1\n%s\nd-fifo\nlocal\nfifo\n", key);
    pathf(p, sizeof p, "%s/datasets/%s-0000000000000001.meta", st, key);
    put(p, rec);
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000002");
    mkdir(p, 0700);
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000002/session");
    CHECK(mkfifo(p, 0600) == 0, "mkfifo");
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000003");
    mkdir(p, 0700);
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000003/session");
    put(p, "rtrain-session 1\ns-00000000000000000000000000000003\ntok\nlocal\nfifo\n");
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000003/p-1");
    mkdir(p, 0700);
    pathf(p, sizeof p, "%s/%s", st,
          "sessions/s-00000000000000000000000000000003/p-1/ckpt-000000000001.rtck");
    CHECK(mkfifo(p, 0600) == 0, "mkfifo");
    /* 8 GiB sparse files: a dataset whose head claims them all, one whose
     * head claims 16 bytes, a checkpoint */
    ds_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, "RTDATA1", 8);
    h.n_parts = 1;
    h.len = (8ull << 30) - 4096;
    const char *big[] = {"1111111111111111aaaaaaaaaaaaaaaa", "2222222222222222bbbbbbbbbbbbbbbb"};
    for (int i = 0; i < 2; i++) {
        if (i == 1)
            h.len = 16;
        pathf(p, sizeof p, "%s/datasets/%s.data", st, big[i]);
        sparse(p, &h, sizeof h, (off_t)8 << 30);
        snprintf(rec, sizeof rec, "rtrain-dataset 1\n%s\nd-big%d\nlocal\nbig\n", big[i], i);
        pathf(p, sizeof p, "%s/datasets/%s-0000000000000001.meta", st, big[i]);
        put(p, rec);
    }
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000004");
    mkdir(p, 0700);
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000004/session");
    put(p, "rtrain-session 1\ns-00000000000000000000000000000004\ntok\nlocal\nbig\n");
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000004/p-1");
    mkdir(p, 0700);
    pathf(p, sizeof p, "%s/%s", st,
          "sessions/s-00000000000000000000000000000004/p-1/ckpt-000000000001.rtck");
    sparse(p, "RTCKPT1", 8, (off_t)8 << 30);

    itest_daemon d;
    const char *extra[] = {"--state-dir", st, "--max-memory-bytes", "1073741824", NULL};
    int started = itest_daemon_start(&d, RTRAIND, extra) == 0;
    CHECK(started, "the daemon did not start on the hostile state dir within 30 s");
    if (!started)
        return;
    uint64_t hwm = vm_hwm_kb(d.pid);
    CHECK(hwm > 0 && hwm < 512 * 1024, "peak RSS %llu KiB: a file was read whole",
          (unsigned long long)hwm);
    itest_conn *c = itest_connect(d.addr);
    char sid[64];
    CHECK(itest_session(c, "after", sid) == 0, "the daemon serves: CreateSession");
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "daemon exit");
    outside_check(out, "a symlinked session folder at start");
    outside_check(out2, "a symlink at .probe");
    pathf(p, sizeof p, "%s/%s", st, "sessions/s-00000000000000000000000000000001");
    struct stat sb;
    CHECK(lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode), "the planted symlink is left alone");
}

static Rtrain__V1__CreateSessionResponse *session(itest_conn *c)
{
    Rtrain__V1__CreateSessionRequest q = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
    q.name = "hostile";
    Rtrain__V1__CreateSessionResponse *r = NULL;
    itest_res res;
    itest_unary(c, "CreateSession", &q.base, &rtrain__v1__create_session_response__descriptor,
                (ProtobufCMessage **)&r, &res);
    CHECK(r != NULL, "CreateSession: %d %s", res.status, res.details);
    itest_res_free(&res);
    return r;
}

static void rm_tree(const char *path)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    CHECK(system(cmd) == 0, "%s", cmd);
}

static void test_while_serving(void)
{
    char st[300], out[300], out2[300], p[700], q[700];
    setup("serving", st, "out-close", out, "out-tmp", out2);
    itest_daemon d;
    const char *extra[] = {"--state-dir", st, NULL};
    if (itest_daemon_start(&d, RTRAIND, extra) < 0) {
        CHECK(0, "the daemon did not start");
        return;
    }
    itest_conn *c = itest_connect(d.addr);

    /* CloseSession of a session whose folder became a symlink */
    Rtrain__V1__CreateSessionResponse *s = session(c);
    if (s) {
        pathf(p, sizeof p, "%s/sessions/%s", st, s->session_id);
        rm_tree(p);
        CHECK(symlink(out, p) == 0, "symlink");
        Rtrain__V1__CloseSessionRequest cq = RTRAIN__V1__CLOSE_SESSION_REQUEST__INIT;
        cq.session_id = s->session_id;
        itest_res r;
        itest_unary(c, "CloseSession", &cq.base, &rtrain__v1__close_session_response__descriptor,
                    NULL, &r);
        CHECK(r.status == 0, "CloseSession: %d %s", r.status, r.details);
        itest_res_free(&r);
        outside_check(out, "CloseSession of a symlinked session folder");
        FREE(s);
    }

    /* a link at a checkpoint's temporary name */
    s = session(c);
    if (s) {
        static Rtrain__V1__TrainConfig cfg;
        itest_iris_config(&cfg);
        Rtrain__V1__CompileRequest cq = RTRAIN__V1__COMPILE_REQUEST__INIT;
        cq.session_id = s->session_id;
        cq.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
        cq.graph = itest_iris_graph(8);
        cq.config = &cfg;
        Rtrain__V1__CompileResponse *cr = NULL;
        itest_res r;
        itest_unary(c, "Compile", &cq.base, &rtrain__v1__compile_response__descriptor,
                    (ProtobufCMessage **)&cr, &r);
        CHECK(cr != NULL, "Compile: %d %s", r.status, r.details);
        itest_res_free(&r);
        if (cr) {
            /* Compile wrote ckpt 1; the next is 2 */
            pathf(q, sizeof q, "%s/%s", out2, "b.txt");
            snprintf(p, sizeof p, "%s/sessions/%s/%s/ckpt-000000000002.rtck.tmp", st,
                     s->session_id, cr->program_id);
            CHECK(symlink(q, p) == 0, "symlink %s: %s", p, strerror(errno));
            Rtrain__V1__CheckpointRequest kq = RTRAIN__V1__CHECKPOINT_REQUEST__INIT;
            kq.session_id = s->session_id;
            kq.program_id = cr->program_id;
            kq.session_token = s->session_token;
            kq.save = 1;
            Rtrain__V1__CheckpointResponse *kr = NULL;
            itest_unary(c, "Checkpoint", &kq.base, &rtrain__v1__checkpoint_response__descriptor,
                        (ProtobufCMessage **)&kr, &r);
            CHECK(kr && kr->saved, "Checkpoint{save}: %d %s", r.status, r.details);
            itest_res_free(&r);
            FREE(kr);
            outside_check(out2, "a link at a checkpoint's temporary name");
            snprintf(p, sizeof p, "%s/sessions/%s/%s/ckpt-000000000002.rtck", st,
                     s->session_id, cr->program_id);
            struct stat sb;
            CHECK(lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 1000,
                  "the checkpoint is written as a file of its own");
        }
        FREE(cr);
        FREE(s);
    }
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "daemon exit");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    RTRAIND = argv[1];
    snprintf(TMP, sizeof TMP, "/tmp/rt-state-dir-XXXXXX");
    if (!mkdtemp(TMP)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_refused);
    RUN(test_hostile_start);
    RUN(test_while_serving);
    rm_tree(TMP);
    return itest_summary();
}
