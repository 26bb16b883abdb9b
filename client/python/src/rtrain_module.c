/*
 * rtrain_module.c - the CPython extension `rtrain._rtrain`, on librtrain.
 *
 * The C side does the real work: the connection, buffer-protocol uploads
 * (C-contiguous float32/int32 memory goes to the wire without a copy), the
 * fit with its progress display (librtrain's rt_progress) and cancellation,
 * the steps-per-call loop (librtrain's rt_client_train_steps), exceptions carrying the
 * daemon's message, and the timing account of every call. The pure-Python
 * package around it (rtrain/__init__.py) only declares models and converts
 * arguments.
 *
 *     import rtrain._rtrain as R
 *     c = R.Client("127.0.0.1:7070", 5.0)
 *     p = c._compile(keras_json, {"loss": "mse", "batch_size": 20})
 *     ds = c._upload(x_f32, y_f32)
 *     p.fit(ds["id"], None, 20, 6, 0, 1, history, timings)
 *
 * Threads and the GIL: every network wait runs with the GIL released. An
 * rt_client serves one thread at a time, so each Client has a lock that
 * calls take (waiting for it without the GIL). Client.cancel() takes no lock:
 * librtrain's rt_client_cancel is safe from any thread or a signal handler.
 *
 * Ctrl-C: while a fit runs on the main thread, a SIGINT handler is chained
 * in front of Python's. It cancels the remote call at once (the daemon stops
 * at a step boundary and keeps the weights of the steps done) and then runs
 * Python's own handler, so the KeyboardInterrupt is raised when the stream
 * has ended. A simulated interrupt (_thread.interrupt_main) has no OS
 * signal; it is seen by PyErr_CheckSignals at the next stream event.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "rtrain/rtrain.h"
#include "rt_progress.h"
#include "rt_version.h"
#include "rtrain/rtrain_data.h"
#include "rtrain/rtrain_tb.h"

/* Ctrl-C during a blocking call: see the SIGINT section below. */
static int rt_py__sig_install(rt_client *c);
static void rt_py__sig_remove(int installed);
static int rt_py__sig_raised(int installed);

/* ------------------------------------------------------------ exceptions */

static PyObject *RtError;            /* rtrain.Error */
static PyObject *RtConnectionError;  /* UNAVAILABLE; also builtins.ConnectionError */
static PyObject *RtInvalidArgument;  /* also ValueError */
static PyObject *RtNotFound;         /* also LookupError */
static PyObject *RtDeadlineExceeded; /* also TimeoutError */
static PyObject *RtCancelled;
static PyObject *RtResourceExhausted;
static PyObject *RtFailedPrecondition;
static PyObject *RtAlreadyExists;
static PyObject *RtUnauthenticated;
static PyObject *RtUnimplemented; /* also NotImplementedError */
static PyObject *RtDataLoss;
static PyObject *RtInternalError;

static PyObject *rt_py__exc_for_grpc(int st)
{
    switch (st) {
    case 1: return RtCancelled;
    case 3: return RtInvalidArgument;
    case 4: return RtDeadlineExceeded;
    case 5: return RtNotFound;
    case 6: return RtAlreadyExists;
    case 8: return RtResourceExhausted;
    case 9: return RtFailedPrecondition;
    case 12: return RtUnimplemented;
    case 13: return RtInternalError;
    case 14: return RtConnectionError;
    case 15: return RtDataLoss;
    case 16: return RtUnauthenticated;
    default: return RtError;
    }
}

/* Raise the exception for rc with msg; attributes code (the RT_E* value),
 * name ("EINVAL") and grpc_status let a notebook branch on them. */
static PyObject *rt_py__raise(int rc, int grpc_status, const char *msg)
{
    /* Prefer the status the daemon sent; a client-side failure has none. */
    int st = grpc_status > 0 ? grpc_status : rt_err_to_grpc(rc);
    PyObject *type = rt_py__exc_for_grpc(st);
    if (!msg || !*msg)
        msg = rt_strerror(rc);
    PyObject *exc = PyObject_CallFunction(type, "s", msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc);
    PyObject *name = PyUnicode_FromString(rt_err_name(rc));
    PyObject *gst = PyLong_FromLong(st);
    if (code && name && gst) {
        PyObject_SetAttrString(exc, "code", code);
        PyObject_SetAttrString(exc, "name", name);
        PyObject_SetAttrString(exc, "grpc_status", gst);
    }
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_XDECREF(gst);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ------------------------------------------------------------ timings */

static int rt_py__set_u64(PyObject *d, const char *k, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (!o)
        return -1;
    int r = PyDict_SetItemString(d, k, o);
    Py_DECREF(o);
    return r;
}

static int rt_py__set_obj(PyObject *d, const char *k, PyObject *o)
{
    if (!o)
        return -1;
    int r = PyDict_SetItemString(d, k, o);
    Py_DECREF(o);
    return r;
}

/* One call's account as a dict of ns (names match rt_client_timings). */
static PyObject *rt_py__timings_dict(const rt_client_timings *t)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (rt_py__set_obj(d, "method", PyUnicode_FromString(t->method ? t->method : "?")) < 0 ||
        rt_py__set_obj(d, "has_server", PyBool_FromLong(t->has_server)) < 0 ||
        rt_py__set_obj(d, "cache_hit", PyBool_FromLong(t->cache_hit)) < 0 ||
        rt_py__set_u64(d, "start_ns", t->start_ns) < 0 ||
        rt_py__set_u64(d, "queue_ns", t->queue_ns) < 0 ||
        rt_py__set_u64(d, "decode_ns", t->decode_ns) < 0 ||
        rt_py__set_u64(d, "compile_ns", t->compile_ns) < 0 ||
        rt_py__set_u64(d, "execute_ns", t->execute_ns) < 0 ||
        rt_py__set_u64(d, "encode_ns", t->encode_ns) < 0 ||
        rt_py__set_u64(d, "server_other_ns", t->server_other_ns) < 0 ||
        rt_py__set_u64(d, "server_total_ns", t->server_total_ns) < 0 ||
        rt_py__set_u64(d, "auth_ns", t->auth_ns) < 0 ||
        rt_py__set_u64(d, "durable_ns", t->durable_ns) < 0 ||
        rt_py__set_u64(d, "client_encode_ns", t->client_encode_ns) < 0 ||
        rt_py__set_u64(d, "round_trip_ns", t->round_trip_ns) < 0 ||
        rt_py__set_u64(d, "client_decode_ns", t->client_decode_ns) < 0 ||
        rt_py__set_u64(d, "client_total_ns", t->client_total_ns) < 0 ||
        rt_py__set_u64(d, "wire_ns", t->wire_ns) < 0 ||
        rt_py__set_u64(d, "unattributed_ns", t->unattributed_ns) < 0 ||
        rt_py__set_u64(d, "bytes_sent", t->bytes_sent) < 0 ||
        rt_py__set_u64(d, "bytes_received", t->bytes_received) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* ------------------------------------------------------------ Client */

typedef struct {
    PyObject_HEAD rt_client *c;
    PyThread_type_lock lock;
    char sid[RT_ID_MAX];
    int has_session;
    /* Set by cancel(); a fit checks it at every event and between calls,
     * because a busy stream may never give librtrain's own flag a look. */
    volatile sig_atomic_t cancel_req;
    volatile unsigned long owner; /* thread holding lock, 0 = none */
    PyObject *last_timings;       /* dict or None */
    /* Programs whose Python object went away while the lock was taken
     * (another thread's call, or a call on this thread that collected
     * it): dropped on the daemon when that call gives the lock back
     * (rt_py__unlock). Under the GIL. */
    char (*pending)[RT_ID_MAX];
    int n_pending, cap_pending;
} ClientObject;

static PyTypeObject ClientType;

/* Take the client's lock, waiting without the GIL. A call on a thread that
 * already holds it (say, from a fit's progress output) would deadlock, so it
 * is an error instead; so is a client closed meanwhile (need_open). */
static int rt_py__lock(ClientObject *self, int need_open)
{
    unsigned long me = PyThread_get_thread_ident();
    if (self->owner == me) {
        PyErr_SetString(PyExc_RuntimeError, "this rtrain client is already in a call on this "
                                            "thread (e.g. from a fit's progress output)");
        return -1;
    }
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    self->owner = me;
    if (need_open && !self->c) {
        self->owner = 0;
        PyThread_release_lock(self->lock);
        PyErr_SetString(RtError, "the client is closed");
        return -1;
    }
    return 0;
}

static int rt_py__finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Drop the pending programs (GIL and lock held, the GIL released around
 * the calls): best effort, a short deadline each, failures ignored (a
 * program a drop misses goes with the session). Keeps any exception set. */
static void rt_py__drop_pending(ClientObject *self)
{
    if (!self->n_pending)
        return;
    rt_client *c = self->c;
    int n = self->n_pending;
    self->n_pending = 0;
    if (!c || !self->has_session || rt_py__finalizing())
        return;
    /* the list is this call's now: another thread may add to a new one
     * while the GIL is released */
    char(*ids)[RT_ID_MAX] = self->pending;
    self->pending = NULL;
    self->cap_pending = 0;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    Py_BEGIN_ALLOW_THREADS for (int i = 0; i < n; i++)
    {
        rt_client_next_timeout_ms(c, 2000);
        rt_client_drop_program(c, self->sid, ids[i]);
    }
    Py_END_ALLOW_THREADS PyErr_Restore(et, ev, tb);
    PyMem_Free(ids);
}

static void rt_py__unlock(ClientObject *self)
{
    rt_py__drop_pending(self);
    self->owner = 0;
    PyThread_release_lock(self->lock);
}

/* A Program object is gone: its program leaves the daemon now when the
 * client is free, else when the call holding the client ends. Never
 * raises, never waits for another thread's call; nothing at interpreter
 * shutdown or on a closed client (closing the session frees it). */
static void rt_py__drop_program(ClientObject *self, const char *id)
{
    if (!self->c || !self->has_session || !id[0] || rt_py__finalizing())
        return;
    if (self->n_pending == self->cap_pending) {
        int nc = self->cap_pending ? 2 * self->cap_pending : 4;
        void *v = PyMem_Realloc(self->pending, sizeof *self->pending * (size_t)nc);
        if (!v)
            return; /* the session frees it when it closes */
        self->pending = v;
        self->cap_pending = nc;
    }
    snprintf(self->pending[self->n_pending++], RT_ID_MAX, "%s", id);
    if (self->owner == PyThread_get_thread_ident() ||
        !PyThread_acquire_lock(self->lock, NOWAIT_LOCK))
        return; /* the call holding the lock drops it at its end */
    self->owner = PyThread_get_thread_ident();
    rt_py__unlock(self);
}

/* Keep the last call's timings as a dict (GIL held, lock held). Returns the
 * new dict (borrowed from self) or NULL with an exception set. */
static PyObject *rt_py__record(ClientObject *self)
{
    rt_client_timings t;
    if (rt_client_last_timings(self->c, &t) < 0)
        return Py_None;
    PyObject *d = rt_py__timings_dict(&t);
    if (!d)
        return NULL;
    Py_XSETREF(self->last_timings, d);
    return d;
}

static int rt_py__check_open(ClientObject *self)
{
    if (!self->c) {
        PyErr_SetString(RtError, "the client is closed");
        return -1;
    }
    return 0;
}

static PyObject *rt_py__fail(ClientObject *self, int rc)
{
    return rt_py__raise(rc, rt_client_grpc_status(self->c), rt_client_errmsg(self->c));
}

static PyObject *Client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    ClientObject *self = (ClientObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->last_timings = Py_NewRef(Py_None);
    return (PyObject *)self;
}

/* Close the session (best effort, short deadline) and free the handle. */
static void rt_py__close(ClientObject *self)
{
    if (!self->c)
        return;
    rt_client *c = self->c;
    self->c = NULL;
    if (self->has_session) {
        self->has_session = 0;
        Py_BEGIN_ALLOW_THREADS rt_client_next_timeout_ms(c, 2000);
        rt_client_session_close(c, self->sid);
        Py_END_ALLOW_THREADS
    }
    rt_client_destroy(c);
}

static void Client_dealloc(ClientObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->c) {
        /* Nobody else can hold the lock once the refcount is 0. */
        rt_py__close(self);
    }
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_CLEAR(self->last_timings);
    PyMem_Free(self->pending);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Client_traverse(ClientObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->last_timings);
    return 0;
}

static int Client_clear(ClientObject *self)
{
    Py_CLEAR(self->last_timings);
    return 0;
}

static int Client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"target",  "timeout", "name",       "tls_ca", "tls_cert",
                             "tls_key", "token",   "token_file", NULL};
    const char *target = NULL, *name = "python";
    rt_client_opts co;
    rt_client_opts_init(&co);
    double timeout = RT_CLIENT_DEFAULT_TIMEOUT_MS / 1000.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zds$zzzzz:Client", kwlist, &target, &timeout,
                                     &name, &co.tls_ca, &co.tls_cert, &co.tls_key, &co.token,
                                     &co.token_file))
        return -1;
    co.target = target;
    if (self->c) {
        PyErr_SetString(RtError, "Client.__init__ called twice");
        return -1;
    }
    if (!(timeout >= 0.0) || timeout > 1e9) {
        char msg[96];
        snprintf(msg, sizeof msg, "timeout must be seconds >= 0 (0 = none), got %g", timeout);
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    rt_client *c = NULL;
    char err[300] = "";
    int rc = rt_client_connect(&co, &c, err, sizeof err);
    if (rc < 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "cannot connect to '%.200s': %s", target ? target : "(default)",
                 err[0] ? err : rt_strerror(rc));
        rt_py__raise(rc, -1, msg);
        return -1;
    }
    rt_client_set_timeout_ms(c, timeout > 0 ? (int64_t)(timeout * 1000.0 + 0.5) : 0);
    /* The session is created now, so a daemon that is down is reported by
     * connect() itself rather than by the first compile. */
    Py_BEGIN_ALLOW_THREADS rc = rt_client_session_create(c, name, self->sid);
    Py_END_ALLOW_THREADS self->c = c;
    rt_py__record(self);
    if (rc < 0) {
        rt_py__fail(self, rc);
        self->c = NULL;
        rt_client_destroy(c);
        return -1;
    }
    self->has_session = 1;
    return 0;
}

static PyObject *Client_close(ClientObject *self, PyObject *unused)
{
    if (rt_py__lock(self, 0) < 0)
        return NULL;
    rt_py__close(self);
    rt_py__unlock(self);
    Py_RETURN_NONE;
}

static PyObject *Client_cancel(ClientObject *self, PyObject *unused)
{
    /* No lock: this is how another thread stops a call in flight. */
    rt_client *c = self->c;
    self->cancel_req = 1;
    if (c)
        rt_client_cancel(c);
    Py_RETURN_NONE;
}

static PyObject *rt_py__strlist(char **v, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *s = PyUnicode_FromString(v[i] ? v[i] : "");
        if (!s) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, s);
    }
    return l;
}

static PyObject *Client_info(ClientObject *self, PyObject *unused)
{
    if (rt_py__check_open(self) < 0)
        return NULL;
    rt_client_info info;
    memset(&info, 0, sizeof info);
    int rc;
    if (rt_py__lock(self, 1) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS rc = rt_client_info_get(self->c, &info);
    Py_END_ALLOW_THREADS PyObject *res = NULL;
    if (!rt_py__record(self))
        goto out;
    if (rc < 0) {
        rt_py__fail(self, rc);
        goto out;
    }
    res = Py_BuildValue(
        "{s:s,s:I,s:{s:s,s:s,s:s,s:K,s:I},s:{s:K,s:K,s:I,s:K,s:K,s:K,s:K},"
        "s:N,s:N,s:N,s:N,s:s}",
        "version", info.version ? info.version : "", "engine_version",
        (unsigned)info.engine_version, "device", "name", info.device_name ? info.device_name : "",
        "kind", info.device_kind ? info.device_kind : "", "backend",
        info.backend ? info.backend : "", "memory_bytes",
        (unsigned long long)info.device_memory_bytes, "cores", (unsigned)info.device_cores,
        "limits", "max_message_bytes", (unsigned long long)info.max_message_bytes,
        "max_dataset_bytes", (unsigned long long)info.max_dataset_bytes, "max_sessions",
        (unsigned)info.max_sessions, "max_dim", (unsigned long long)info.max_dim, "max_params",
        (unsigned long long)info.max_params, "max_steps_per_call",
        (unsigned long long)info.max_steps_per_call, "max_upload_bytes",
        (unsigned long long)info.max_upload_bytes, "ops", rt_py__strlist(info.ops, info.n_ops),
        "formats", rt_py__strlist(info.formats, info.n_formats), "losses",
        rt_py__strlist(info.losses, info.n_losses), "optimizers",
        rt_py__strlist(info.optimizers, info.n_optimizers), "target", rt_client_target(self->c));
out:
    rt_py__unlock(self);
    rt_client_info_free(&info);
    return res;
}

static PyObject *Client_ping(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"payload_bytes", NULL};
    Py_ssize_t payload = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:ping", kwlist, &payload))
        return NULL;
    if (payload < 0) {
        PyErr_SetString(PyExc_ValueError, "payload_bytes must be >= 0");
        return NULL;
    }
    if (rt_py__check_open(self) < 0)
        return NULL;
    uint64_t rtt = 0;
    int rc;
    if (rt_py__lock(self, 1) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS rc = rt_client_ping(self->c, (size_t)payload, &rtt);
    Py_END_ALLOW_THREADS PyObject *res = NULL;
    if (!rt_py__record(self))
        goto out;
    if (rc < 0)
        rt_py__fail(self, rc);
    else
        res = PyFloat_FromDouble((double)rtt / 1e9);
out:
    rt_py__unlock(self);
    return res;
}

static PyObject *Client_get_last_timings(ClientObject *self, void *closure)
{
    return Py_NewRef(self->last_timings);
}

static PyObject *Client_get_target(ClientObject *self, void *closure)
{
    if (!self->c)
        Py_RETURN_NONE;
    return PyUnicode_FromString(rt_client_target(self->c));
}

static PyObject *Client_get_session(ClientObject *self, void *closure)
{
    if (!self->c || !self->has_session)
        Py_RETURN_NONE;
    return PyUnicode_FromString(self->sid);
}

static PyObject *Client_get_closed(ClientObject *self, void *closure)
{
    return PyBool_FromLong(self->c == NULL);
}

/* Tracing: every call's account from now on, as a list of dicts. */
/* set_reattach(seconds): how long a fit (a Fit stream or RunSteps calls)
 * waits for a restarted daemon (librtrain's rt_client_set_reattach_ms; 0 = not). */
static PyObject *Client_set_reattach(ClientObject *self, PyObject *args)
{
    double s;
    if (!PyArg_ParseTuple(args, "d:set_reattach", &s))
        return NULL;
    if (!(s >= 0) || s > 1e7) {
        PyErr_SetString(PyExc_ValueError, "reattach must be seconds in [0, 1e7]");
        return NULL;
    }
    if (rt_py__check_open(self) < 0 || rt_py__lock(self, 1) < 0)
        return NULL;
    rt_client_set_reattach_ms(self->c, (int64_t)(s * 1000));
    rt_py__unlock(self);
    Py_RETURN_NONE;
}

static PyObject *Client_trace(ClientObject *self, PyObject *args)
{
    int on = 1;
    if (!PyArg_ParseTuple(args, "|p:trace", &on))
        return NULL;
    if (rt_py__check_open(self) < 0)
        return NULL;
    if (rt_py__lock(self, 1) < 0)
        return NULL;
    rt_client_trace_clear(self->c);
    rt_client_trace_enable(self->c, on);
    rt_py__unlock(self);
    Py_RETURN_NONE;
}

static PyObject *Client_trace_calls(ClientObject *self, PyObject *unused)
{
    if (rt_py__check_open(self) < 0)
        return NULL;
    if (rt_py__lock(self, 1) < 0)
        return NULL;
    size_t n = 0;
    const rt_client_timings *t = rt_client_trace_calls(self->c, &n);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *d = rt_py__timings_dict(&t[i]);
        if (!d) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, d);
    }
    rt_py__unlock(self);
    return l;
}

static PyObject *Client_trace_write(ClientObject *self, PyObject *args)
{
    PyObject *path_obj;
    if (!PyArg_ParseTuple(args, "O&:trace_write", PyUnicode_FSConverter, &path_obj))
        return NULL;
    if (rt_py__check_open(self) < 0) {
        Py_DECREF(path_obj);
        return NULL;
    }
    int rc;
    if (rt_py__lock(self, 1) < 0) {
        Py_DECREF(path_obj);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS rc = rt_client_trace_write(self->c, PyBytes_AS_STRING(path_obj));
    Py_END_ALLOW_THREADS PyObject *res = rc < 0 ? rt_py__fail(self, rc) : Py_NewRef(Py_None);
    rt_py__unlock(self);
    Py_DECREF(path_obj);
    return res;
}

/* ------------------------------------------------------------ buffers */

/* A float32 or int32 C-contiguous buffer, as rt_client_array. The caller
 * keeps *view until the call that reads the memory has returned: this is
 * what makes uploads zero-copy. Conversions (float64 -> float32, strided ->
 * contiguous) belong to the Python layer, which documents them; here a
 * wrong buffer is an error. */
static int rt_py__array(PyObject *obj, const char *what, int allow_int, Py_buffer *view,
                        rt_client_array *a)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            if (PyObject_CheckBuffer(obj))
                PyErr_Format(PyExc_ValueError,
                             "%s must be C-contiguous (use numpy.ascontiguousarray)", what);
            else
                PyErr_Format(PyExc_TypeError,
                             "%s must support the buffer protocol (a numpy array), not %.100s",
                             what, Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    rt_client_dtype dt;
    if (!strcmp(f, "f") && view->itemsize == 4)
        dt = RT_DTYPE_F32;
    else if (allow_int && (!strcmp(f, "i") || !strcmp(f, "l")) && view->itemsize == 4)
        dt = RT_DTYPE_I32;
    else {
        PyErr_Format(PyExc_TypeError,
                     "%s must hold float32%s values, got buffer format '%s' "
                     "(%zd bytes per item)",
                     what, allow_int ? " or int32" : "", view->format ? view->format : "B",
                     view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    if (view->ndim < 1 || view->ndim > RT_CLIENT_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s must have 1 to %d dimensions (samples first), got %d",
                     what, RT_CLIENT_MAX_DIMS, view->ndim);
        PyBuffer_Release(view);
        return -1;
    }
    memset(a, 0, sizeof *a);
    a->data = view->buf;
    a->dtype = dt;
    a->ndim = view->ndim;
    for (int i = 0; i < view->ndim; i++)
        a->shape[i] = view->shape[i];
    return 0;
}

static PyObject *rt_py__shape_tuple(int ndim, const int64_t *shape)
{
    PyObject *t = PyTuple_New(ndim);
    for (int i = 0; t && i < ndim; i++) {
        PyObject *v = PyLong_FromLongLong(shape[i]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* A library tensor as a new float32/int32 numpy array (one copy: the
 * library's buffer is freed by its own free function). */
static PyObject *rt_py__tensor_to_numpy(const rt_client_tensor *t)
{
    int typenum;
    switch (t->dtype) {
    case RT_DTYPE_F32: typenum = NPY_FLOAT32; break;
    case RT_DTYPE_I32: typenum = NPY_INT32; break;
    case RT_DTYPE_I64: typenum = NPY_INT64; break;
    case RT_DTYPE_U8: typenum = NPY_UINT8; break;
    default:
        PyErr_Format(RtError, "the daemon sent a tensor of unknown dtype %d", (int)t->dtype);
        return NULL;
    }
    npy_intp dims[RT_CLIENT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        dims[i] = (npy_intp)t->shape[i];
    PyObject *arr = PyArray_SimpleNew(t->ndim, dims, typenum);
    if (!arr)
        return NULL;
    size_t want = (size_t)PyArray_NBYTES((PyArrayObject *)arr);
    if (want != t->nbytes) {
        Py_DECREF(arr);
        PyErr_Format(RtError, "the daemon sent %zu bytes for a tensor of %zu", t->nbytes, want);
        return NULL;
    }
    if (want)
        memcpy(PyArray_DATA((PyArrayObject *)arr), t->data, want);
    return arr;
}

static PyObject *dataset_dict(const rt_client_dataset *ds);

/* _upload(x, y=None, name="data", sample_weight=None, storage=0,
 * shuffle_buffer=0) -> dict(id, samples, ...) */
static PyObject *Client_upload(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"x", "y", "name", "sample_weight", "storage", "shuffle_buffer", NULL};
    PyObject *xo, *yo = Py_None, *wo = Py_None;
    const char *name = "data";
    int storage = 0;
    unsigned long long shuf = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OsOiK:_upload", kwlist, &xo, &yo, &name, &wo,
                                     &storage, &shuf))
        return NULL;
    if (storage < 0 || storage > 2) {
        PyErr_SetString(PyExc_ValueError, "storage is 'auto', 'memory' or 'stream'");
        return NULL;
    }
    if (wo != Py_None && yo == Py_None) {
        PyErr_SetString(PyExc_ValueError, "sample_weight needs y");
        return NULL;
    }
    if (rt_py__check_open(self) < 0)
        return NULL;
    Py_buffer xv, yv;
    rt_client_array xa, ya;
    if (rt_py__array(xo, "x", 0, &xv, &xa) < 0)
        return NULL;
    int has_y = yo != Py_None;
    if (has_y && rt_py__array(yo, "y", 1, &yv, &ya) < 0) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    if (has_y && ya.shape[0] != xa.shape[0]) {
        PyErr_Format(PyExc_ValueError, "x has %lld samples but y has %lld", (long long)xa.shape[0],
                     (long long)ya.shape[0]);
        PyBuffer_Release(&xv);
        PyBuffer_Release(&yv);
        return NULL;
    }
    Py_buffer wv;
    rt_client_array wa;
    int has_w = wo != Py_None;
    if (has_w && rt_py__array(wo, "sample_weight", 1, &wv, &wa) < 0) {
        PyBuffer_Release(&xv);
        PyBuffer_Release(&yv);
        return NULL;
    }
    if (has_w && (wa.ndim != 1 || wa.shape[0] != xa.shape[0])) {
        PyErr_Format(PyExc_ValueError, "sample_weight must have shape (%lld,)",
                     (long long)xa.shape[0]);
        PyBuffer_Release(&xv);
        PyBuffer_Release(&yv);
        PyBuffer_Release(&wv);
        return NULL;
    }
    rt_client_dataset ds;
    memset(&ds, 0, sizeof ds);
    int rc;
    if (rt_py__lock(self, 1) < 0) {
        PyBuffer_Release(&xv);
        if (has_y)
            PyBuffer_Release(&yv);
        if (has_w)
            PyBuffer_Release(&wv);
        return NULL;
    }
    int inst = rt_py__sig_install(self->c);
    Py_BEGIN_ALLOW_THREADS rt_client_next_timeout_ms(self->c, 0); /* big uploads take their time */
    rt_client_next_upload_storage(self->c, storage, shuf);
    rc = rt_client_upload_weighted(self->c, self->sid, name, &xa, has_y ? &ya : NULL,
                                   has_w ? &wa : NULL, &ds);
    Py_END_ALLOW_THREADS rt_py__sig_remove(inst);
    PyObject *res = NULL;
    if (!rt_py__record(self) || rt_py__sig_raised(inst))
        goto out;
    if (rc < 0) {
        rt_py__fail(self, rc);
        goto out;
    }
    res = dataset_dict(&ds);
    if (res) {
        PyObject *r = PyLong_FromUnsignedLongLong((unsigned long long)ds.bytes_resumed);
        if (!r || PyDict_SetItemString(res, "bytes_resumed", r) < 0)
            Py_CLEAR(res);
        Py_XDECREF(r);
    }
out:
    rt_py__unlock(self);
    PyBuffer_Release(&xv);
    if (has_y)
        PyBuffer_Release(&yv);
    if (has_w)
        PyBuffer_Release(&wv);
    return res;
}

/* An uploaded dataset as the dict rtrain.Dataset takes. */
static PyObject *dataset_dict(const rt_client_dataset *ds)
{
    return Py_BuildValue(
        "{s:s,s:K,s:N,s:i,s:N,s:K,s:O,s:K,s:K,s:s,s:O,s:K}", "id", ds->id, "samples",
        (unsigned long long)ds->samples, "x_shape", rt_py__shape_tuple(ds->x_ndim, ds->x_shape),
        "y_dtype", (int)ds->y_dtype, "y_shape", rt_py__shape_tuple(ds->y_ndim, ds->y_shape),
        "bytes", (unsigned long long)ds->bytes, "deduplicated",
        ds->deduplicated ? Py_True : Py_False, "bytes_sent", (unsigned long long)ds->bytes_sent,
        "records_skipped", (unsigned long long)ds->records_skipped, "first_skipped",
        ds->first_skipped, "streamed", ds->streamed ? Py_True : Py_False, "spool_bytes",
        (unsigned long long)ds->spool_bytes);
}

/* _upload_idx(images, labels, normalize=True, name="data", storage=0,
 * shuffle_buffer=0) -> dataset dict. The IDX files (gzipped or not) go up
 * as they are. storage: 0 auto, 1 memory, 2 stream. */
static PyObject *Client_upload_idx(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"images",  "labels",         "normalize", "name",
                             "storage", "shuffle_buffer", NULL};
    PyObject *io, *lo;
    int norm = 1, storage = 0;
    unsigned long long shuf = 0;
    const char *name = "data";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|psiK:_upload_idx", kwlist,
                                     PyUnicode_FSConverter, &io, PyUnicode_FSConverter, &lo, &norm,
                                     &name, &storage, &shuf))
        return NULL;
    if (storage < 0 || storage > 2) {
        Py_DECREF(io);
        Py_DECREF(lo);
        PyErr_SetString(PyExc_ValueError, "storage is 'auto', 'memory' or 'stream'");
        return NULL;
    }
    PyObject *res = NULL;
    char *ip = strdup(PyBytes_AS_STRING(io)), *lp = strdup(PyBytes_AS_STRING(lo));
    Py_DECREF(io);
    Py_DECREF(lo);
    if (!ip || !lp) {
        PyErr_NoMemory();
        goto out;
    }
    if (rt_py__lock(self, 1) < 0)
        goto out;
    rt_client_dataset ds;
    memset(&ds, 0, sizeof ds);
    int rc;
    int inst = rt_py__sig_install(self->c);
    Py_BEGIN_ALLOW_THREADS rt_client_next_timeout_ms(self->c, 0);
    rt_client_next_upload_storage(self->c, storage, shuf);
    rc = rt_client_upload_idx(self->c, self->sid, name, ip, lp, norm, &ds);
    Py_END_ALLOW_THREADS rt_py__sig_remove(inst);
    if (rt_py__record(self) && !rt_py__sig_raised(inst)) {
        if (rc < 0)
            rt_py__fail(self, rc);
        else
            res = dataset_dict(&ds);
    }
    rt_py__unlock(self);
out:
    free(ip);
    free(lp);
    return res;
}

/* _upload_data(source, features=None, label=None, name="data",
 * skip_bad=False, height=0, width=0, channels=0, resize=0, mean=(), std=(),
 * crop_pad=0, flip=False, brightness=0, contrast=0, storage=0, shuffle_buffer=0)
 * -> dataset dict. storage: 0 auto, 1 memory, 2 stream.
 * source: a TFRecord path or glob (features given), a list of TFRecord
 * paths, or an image-folder directory (features None). */
static PyObject *Client_upload_data(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"source",  "features",       "label",    "name",       "skip_bad",
                             "height",  "width",          "channels", "resize",     "mean",
                             "std",     "crop_pad",       "flip",     "brightness", "contrast",
                             "storage", "shuffle_buffer", NULL};
    PyObject *src, *meano = NULL, *stdo = NULL;
    const char *features = NULL, *label = NULL, *name = "data";
    int skip = 0, flip = 0;
    rt_client_image_opts im;
    memset(&im, 0, sizeof im);
    unsigned long long shuf = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|zzspiiiiOOipffiK:_upload_data", kwlist, &src,
                                     &features, &label, &name, &skip, &im.height, &im.width,
                                     &im.channels, &im.resize, &meano, &stdo, &im.crop_pad, &flip,
                                     &im.brightness, &im.contrast, &im.storage, &shuf))
        return NULL;
    if (im.storage < RT_STORAGE_AUTO || im.storage > RT_STORAGE_STREAM) {
        PyErr_SetString(PyExc_ValueError, "storage is 'auto', 'memory' or 'stream'");
        return NULL;
    }
    im.shuffle_buffer = shuf;
    im.flip = flip;
    PyObject *mv[2] = {meano, stdo};
    float *dst[2] = {im.mean, im.std};
    int *cnt[2] = {&im.n_mean, &im.n_std};
    for (int k = 0; k < 2; k++) {
        if (!mv[k] || mv[k] == Py_None)
            continue;
        PyObject *seq = PySequence_Fast(mv[k], "mean and std are sequences of floats");
        if (!seq)
            return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > 3) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "mean and std take 1 or 3 values");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            dst[k][i] = (float)PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        *cnt[k] = (int)n;
        Py_DECREF(seq);
        if (PyErr_Occurred())
            return NULL;
    }
    /* the paths, as UTF-8 copies that outlive the GIL release */
    size_t np = 0;
    char **paths = NULL;
    int is_list = PyList_Check(src) || PyTuple_Check(src);
    PyObject *wrap = is_list ? NULL : Py_BuildValue("(O)", src);
    if (!is_list && !wrap)
        return NULL;
    PyObject *seq = PySequence_Fast(is_list ? src : wrap, "source is a path or a list of paths");
    Py_XDECREF(wrap);
    if (!seq)
        return NULL;
    np = (size_t)PySequence_Fast_GET_SIZE(seq);
    paths = calloc(np ? np : 1, sizeof *paths);
    for (size_t i = 0; paths && i < np; i++) {
        PyObject *b = PyUnicode_EncodeFSDefault(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i));
        if (!b)
            break;
        paths[i] = strdup(PyBytes_AS_STRING(b));
        Py_DECREF(b);
    }
    Py_DECREF(seq);
    PyObject *res = NULL;
    rt_client_example_spec *spec = NULL;
    char err[256];
    if (!paths || PyErr_Occurred())
        goto out;
    if (np == 0) {
        PyErr_SetString(PyExc_ValueError, "no TFRecord paths given");
        goto out;
    }
    if (features) {
        if (rt_client_example_spec_parse(features, label, &spec, err, sizeof err) < 0) {
            PyErr_SetString(PyExc_ValueError, err);
            goto out;
        }
        rt_client_example_spec_set_image(spec, &im);
        rt_client_example_spec_set_skip_bad(spec, skip);
        rt_client_example_spec_set_storage(spec, im.storage, im.shuffle_buffer);
    } else if (np != 1) {
        PyErr_SetString(PyExc_ValueError, "an image folder is one directory");
        goto out;
    }
    if (rt_py__lock(self, 1) < 0)
        goto out;
    rt_client_dataset ds;
    memset(&ds, 0, sizeof ds);
    int rc;
    int inst = rt_py__sig_install(self->c);
    Py_BEGIN_ALLOW_THREADS rt_client_next_timeout_ms(self->c, 0);
    if (!spec)
        rc = rt_client_upload_image_folder(self->c, self->sid, name, paths[0], &im, skip, &ds);
    else if (is_list)
        rc = rt_client_upload_tfrecord(self->c, self->sid, name, (const char *const *)paths, np,
                                       spec, &ds);
    else
        rc = rt_client_upload_tfrecord_glob(self->c, self->sid, name, paths[0], spec, &ds);
    Py_END_ALLOW_THREADS rt_py__sig_remove(inst);
    if (rt_py__record(self) && !rt_py__sig_raised(inst)) {
        if (rc < 0)
            rt_py__fail(self, rc);
        else
            res = dataset_dict(&ds);
    }
    rt_py__unlock(self);
out:
    for (size_t i = 0; paths && i < np; i++)
        free(paths[i]);
    free(paths);
    rt_client_example_spec_free(spec);
    return res;
}

/* ------------------------------------------------------------ Program */

typedef struct {
    PyObject_HEAD ClientObject *client;
    char id[RT_ID_MAX];
    PyObject *report; /* dict */
    PyObject *last_timings;
} ProgramObject;

static PyTypeObject ProgramType;

static void Program_dealloc(ProgramObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->client)
        rt_py__drop_program(self->client, self->id);
    Py_CLEAR(self->client);
    Py_CLEAR(self->report);
    Py_CLEAR(self->last_timings);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Program_traverse(ProgramObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->client);
    Py_VISIT(self->report);
    Py_VISIT(self->last_timings);
    return 0;
}

/* The client stays until the dealloc, which drops the program through it
 * (a client holds no program, so no cycle runs through it). */
static int Program_clear(ProgramObject *self)
{
    Py_CLEAR(self->report);
    Py_CLEAR(self->last_timings);
    return 0;
}

/* Options dict -> rt_train_opts. Strings point into dict values, which the
 * caller keeps alive through the call. */
static int rt_py__opt_get(PyObject *d, const char *k, PyObject **out)
{
    *out = PyDict_GetItemString(d, k); /* borrowed */
    return *out && *out != Py_None;
}

static int rt_py__opt_float(PyObject *d, const char *k, float *dst)
{
    PyObject *v;
    if (!rt_py__opt_get(d, k, &v))
        return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred())
        return -1;
    if (!isfinite(x)) {
        PyErr_Format(PyExc_ValueError, "%s must be finite, got %R", k, v);
        return -1;
    }
    *dst = (float)x;
    return 0;
}

static int rt_py__opt_uint(PyObject *d, const char *k, uint64_t max, uint64_t *dst)
{
    PyObject *v;
    if (!rt_py__opt_get(d, k, &v))
        return 0;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (x < 0 || (uint64_t)x > max) {
        PyErr_Format(PyExc_ValueError, "%s must be in 0..%llu, got %R", k, (unsigned long long)max,
                     v);
        return -1;
    }
    *dst = (uint64_t)x;
    return 0;
}

static int rt_py__opt_str(PyObject *d, const char *k, const char **dst)
{
    PyObject *v;
    if (!rt_py__opt_get(d, k, &v))
        return 0;
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be a string, got %R", k, v);
        return -1;
    }
    *dst = PyUnicode_AsUTF8(v);
    return *dst ? 0 : -1;
}

static int rt_py__opt_bool(PyObject *d, const char *k, int *dst)
{
    PyObject *v;
    if (!rt_py__opt_get(d, k, &v))
        return 0;
    int b = PyObject_IsTrue(v);
    if (b < 0)
        return -1;
    *dst = b;
    return 0;
}

#define RT_PY_MAX_METRICS 8

/* float32 values as bytes (the Python layer packs them), kept alive by the
 * options dict */
static int rt_py__opt_floats(PyObject *d, const char *k, const float **dst, int *n)
{
    PyObject *v;
    if (!rt_py__opt_get(d, k, &v))
        return 0;
    if (!PyBytes_Check(v) || PyBytes_GET_SIZE(v) % 4 || PyBytes_GET_SIZE(v) / 4 > (1 << 20)) {
        PyErr_Format(PyExc_TypeError, "%s must be float32 values as bytes", k);
        return -1;
    }
    *dst = (const float *)PyBytes_AS_STRING(v);
    *n = (int)(PyBytes_GET_SIZE(v) / 4);
    return 0;
}

/* "outputs": a list of dicts {"loss", "from_logits", "weight", "metrics"},
 * one per output of a model with several (rt_train_opts.outputs) */
static int rt_py__outputs(PyObject *d, rt_train_opts *o, rt_output_loss *outs,
                          const char *(*om)[RT_PY_MAX_METRICS])
{
    PyObject *v;
    if (!rt_py__opt_get(d, "outputs", &v))
        return 0;
    if (!PyList_Check(v) || PyList_GET_SIZE(v) > RT_CLIENT_MAX_OUTPUTS) {
        PyErr_Format(PyExc_TypeError, "outputs must be a list of at most %d dicts",
                     RT_CLIENT_MAX_OUTPUTS);
        return -1;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(v); k++) {
        PyObject *e = PyList_GET_ITEM(v, k), *m;
        rt_output_loss *ol = &outs[k];
        memset(ol, 0, sizeof *ol);
        if (!PyDict_Check(e)) {
            PyErr_SetString(PyExc_TypeError, "outputs: each entry must be a dict");
            return -1;
        }
        if (rt_py__opt_str(e, "loss", &ol->loss) < 0 ||
            rt_py__opt_bool(e, "from_logits", &ol->from_logits) < 0)
            return -1;
        if (rt_py__opt_get(e, "weight", &m)) {
            if (rt_py__opt_float(e, "weight", &ol->weight) < 0)
                return -1;
            ol->has_weight = 1;
        }
        if (rt_py__opt_get(e, "metrics", &m)) {
            if (!PyList_Check(m) || PyList_GET_SIZE(m) > RT_PY_MAX_METRICS) {
                PyErr_SetString(PyExc_TypeError, "outputs: metrics must be a short list");
                return -1;
            }
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(m); i++)
                if (!(om[k][i] = PyUnicode_Check(PyList_GET_ITEM(m, i))
                                     ? PyUnicode_AsUTF8(PyList_GET_ITEM(m, i))
                                     : NULL)) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_TypeError, "outputs: metric names are strings");
                    return -1;
                }
            ol->metrics = om[k];
            ol->n_metrics = (int)PyList_GET_SIZE(m);
        }
    }
    o->outputs = outs;
    o->n_outputs = (int)PyList_GET_SIZE(v);
    return 0;
}

static int rt_py__train_opts(PyObject *d, rt_train_opts *o, const char **metrics)
{
    rt_train_opts_init(o);
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "options must be a dict");
        return -1;
    }
    uint64_t u;
    int shuffle = 1;
    if (rt_py__opt_str(d, "loss", &o->loss) < 0 ||
        rt_py__opt_bool(d, "from_logits", &o->from_logits) < 0 ||
        rt_py__opt_str(d, "optimizer", &o->optimizer) < 0 ||
        rt_py__opt_float(d, "learning_rate", &o->lr) < 0 ||
        rt_py__opt_float(d, "momentum", &o->momentum) < 0 ||
        rt_py__opt_bool(d, "nesterov", &o->nesterov) < 0 ||
        rt_py__opt_float(d, "beta_1", &o->beta1) < 0 ||
        rt_py__opt_float(d, "beta_2", &o->beta2) < 0 ||
        rt_py__opt_float(d, "epsilon", &o->eps) < 0 ||
        rt_py__opt_float(d, "weight_decay", &o->weight_decay) < 0 ||
        rt_py__opt_float(d, "rho", &o->rho) < 0 ||
        rt_py__opt_float(d, "clipnorm", &o->clip_norm) < 0 ||
        rt_py__opt_str(d, "schedule", &o->schedule) < 0 ||
        rt_py__opt_str(d, "state_from", &o->state_from) < 0 ||
        rt_py__opt_float(d, "gamma", &o->gamma) < 0 ||
        rt_py__opt_float(d, "min_lr", &o->min_lr) < 0 ||
        rt_py__opt_bool(d, "shuffle", &shuffle) < 0 ||
        rt_py__opt_bool(d, "sync_batchnorm", &o->sync_batchnorm) < 0 ||
        rt_py__opt_str(d, "data_layout", &o->data_layout) < 0 ||
        rt_py__opt_str(d, "precision", &o->precision) < 0 ||
        rt_py__opt_str(d, "reduction", &o->reduction) < 0 ||
        rt_py__opt_float(d, "label_smoothing", &o->label_smoothing) < 0 ||
        rt_py__opt_float(d, "loss_beta", &o->loss_beta) < 0 ||
        rt_py__opt_bool(d, "has_loss_beta", &o->has_loss_beta) < 0 ||
        rt_py__opt_bool(d, "no_loss_check", &o->no_loss_check) < 0 ||
        rt_py__opt_float(d, "l2_weight_decay", &o->l2_weight_decay) < 0 ||
        rt_py__opt_float(d, "dampening", &o->dampening) < 0 ||
        rt_py__opt_floats(d, "class_weight", &o->class_weight, &o->n_class_weight) < 0 ||
        rt_py__opt_floats(d, "pos_weight", &o->pos_weight, &o->n_pos_weight) < 0)
        return -1;
    PyObject *ii;
    if (rt_py__opt_get(d, "ignore_index", &ii)) {
        long long x = PyLong_AsLongLong(ii);
        if (x == -1 && PyErr_Occurred())
            return -1;
        o->has_ignore_index = 1;
        o->ignore_index = x;
    }
    o->no_shuffle = !shuffle;
    /* Ftrl's numbers in Keras' names (keras.optimizers.Ftrl.get_config):
     * any given sends all six, Keras' defaults for the rest */
    static const char *const fk[6] = {"learning_rate_power",
                                      "initial_accumulator_value",
                                      "l1_regularization_strength",
                                      "l2_regularization_strength",
                                      "l2_shrinkage_regularization_strength",
                                      "beta"};
    float *fd[6] = {&o->ftrl_power, &o->ftrl_init,   &o->ftrl_l1,
                    &o->ftrl_l2,    &o->ftrl_shrink, &o->ftrl_beta};
    o->ftrl_power = -0.5f;
    o->ftrl_init = 0.1f;
    for (int i = 0; i < 6; i++) {
        PyObject *fv;
        if (!rt_py__opt_get(d, fk[i], &fv))
            continue;
        double x = PyFloat_AsDouble(fv);
        if (x == -1.0 && PyErr_Occurred())
            return -1;
        *fd[i] = (float)x;
        o->has_ftrl = 1;
    }
    u = o->batch_size;
    if (rt_py__opt_uint(d, "batch_size", UINT32_MAX, &u) < 0)
        return -1;
    o->batch_size = (uint32_t)u;
    u = 0;
    if (rt_py__opt_uint(d, "seed", UINT64_MAX >> 1, &u) < 0)
        return -1;
    o->seed = u;
    u = 0;
    if (rt_py__opt_uint(d, "step_size", UINT32_MAX, &u) < 0)
        return -1;
    o->step_size = (uint32_t)u;
    u = 0;
    if (rt_py__opt_uint(d, "warmup_steps", UINT32_MAX, &u) < 0)
        return -1;
    o->warmup_steps = (uint32_t)u;
    u = 0;
    if (rt_py__opt_uint(d, "total_steps", UINT32_MAX, &u) < 0)
        return -1;
    o->total_steps = (uint32_t)u;

    PyObject *v;
    if (rt_py__opt_get(d, "metrics", &v)) {
        if (!PyList_Check(v) || PyList_GET_SIZE(v) > RT_PY_MAX_METRICS) {
            PyErr_SetString(PyExc_TypeError, "metrics must be a short list of strings");
            return -1;
        }
        Py_ssize_t n = PyList_GET_SIZE(v);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *s = PyList_GET_ITEM(v, i);
            if (!PyUnicode_Check(s)) {
                PyErr_Format(PyExc_TypeError, "metric names must be strings, got %R", s);
                return -1;
            }
            if (!(metrics[i] = PyUnicode_AsUTF8(s)))
                return -1;
        }
        o->metrics = metrics;
        o->n_metrics = (int)n;
    }
    if (rt_py__opt_get(d, "label_dtype", &v)) {
        const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (s && !strcmp(s, "int32"))
            o->label_dtype = RT_DTYPE_I32;
        else if (s && !strcmp(s, "float32"))
            o->label_dtype = RT_DTYPE_F32;
        else {
            PyErr_Format(PyExc_ValueError, "label_dtype must be 'int32' or 'float32', got %R", v);
            return -1;
        }
    }
    if (rt_py__opt_get(d, "label_shape", &v)) {
        PyObject *seq = PySequence_Fast(v, "label_shape must be a tuple of ints");
        if (!seq)
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > RT_CLIENT_MAX_DIMS) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "label_shape has too many dimensions");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            long long x = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
            if (x == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return -1;
            }
            o->label_shape[i] = x;
        }
        o->label_ndim = (int)n;
        Py_DECREF(seq);
    }
    if (rt_py__opt_get(d, "input_shape", &v) && v != Py_None) {
        PyObject *seq = PySequence_Fast(v, "input_shape must be a tuple of ints");
        if (!seq)
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > RT_CLIENT_MAX_DIMS) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "input_shape has too many dimensions");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
            long long x = it == Py_None ? 0 : PyLong_AsLongLong(it);
            if (x == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return -1;
            }
            o->input_shape[i] = x;
        }
        o->input_ndim = (int)n;
        Py_DECREF(seq);
    }
    return 0;
}

static PyObject *rt_py__report(const rt_client_compile_result *r)
{
    PyObject *params = PyList_New((Py_ssize_t)r->n_params);
    if (!params)
        return NULL;
    for (size_t i = 0; i < r->n_params; i++) {
        PyObject *p = Py_BuildValue("(sNO)", r->params[i].name ? r->params[i].name : "",
                                    rt_py__shape_tuple(r->params[i].ndim, r->params[i].shape),
                                    r->params[i].trainable ? Py_True : Py_False);
        if (!p) {
            Py_DECREF(params);
            return NULL;
        }
        PyList_SET_ITEM(params, (Py_ssize_t)i, p);
    }
    PyObject *passes = PyList_New(r->n_passes);
    if (!passes) {
        Py_DECREF(params);
        return NULL;
    }
    for (int i = 0; i < r->n_passes; i++) {
        PyObject *p = Py_BuildValue("(sK)", r->pass_name[i], (unsigned long long)r->pass_ns[i]);
        if (!p) {
            Py_DECREF(params);
            Py_DECREF(passes);
            return NULL;
        }
        PyList_SET_ITEM(passes, (Py_ssize_t)i, p);
    }
    /* each compiled op: (name, op, precision) */
    PyObject *ops = PyList_New((Py_ssize_t)r->n_ops);
    if (!ops) {
        Py_DECREF(params);
        Py_DECREF(passes);
        return NULL;
    }
    for (size_t i = 0; i < r->n_ops; i++) {
        PyObject *p = Py_BuildValue("(sss)", r->ops[i].name ? r->ops[i].name : "", r->ops[i].op,
                                    r->ops[i].precision);
        if (!p) {
            Py_DECREF(params);
            Py_DECREF(passes);
            Py_DECREF(ops);
            return NULL;
        }
        PyList_SET_ITEM(ops, (Py_ssize_t)i, p);
    }
    return Py_BuildValue(
        "{s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:O,s:I,s:N,s:N,s:N,s:N,s:s,s:s,s:N,s:I}", "program_id",
        r->program_id, "param_count", (unsigned long long)r->param_count, "trainable_param_count",
        (unsigned long long)r->trainable_param_count, "flops_per_step",
        (unsigned long long)r->flops_per_step, "arena_bytes", (unsigned long long)r->arena_bytes,
        "naive_bytes", (unsigned long long)r->naive_bytes, "compile_ns",
        (unsigned long long)r->compile_ns, "cache_hit", r->cache_hit ? Py_True : Py_False,
        "kernels", (unsigned)r->kernels, "input_shape",
        rt_py__shape_tuple(r->input_ndim, r->input_shape), "output_shape",
        rt_py__shape_tuple(r->output_ndim, r->output_shape), "params", params, "passes", passes,
        "data_layout", r->data_layout, "backend", r->backend, "ops", ops, "bf16_ops",
        (unsigned)r->bf16_ops);
}

/* _compile(model, options, onnx_output=None) -> Program; model: Keras
 * JSON (str) or a serialized ONNX ModelProto (bytes) */
static PyObject *Client_compile(ClientObject *self, PyObject *args)
{
    const char *json = NULL, *onnx_output = NULL;
    Py_ssize_t json_len = 0;
    PyObject *opts, *model;
    if (!PyArg_ParseTuple(args, "OO!|z:_compile", &model, &PyDict_Type, &opts, &onnx_output))
        return NULL;
    if (rt_py__check_open(self) < 0)
        return NULL;
    const int onnx = PyBytes_Check(model);
    if (onnx) {
        json = PyBytes_AS_STRING(model);
        json_len = PyBytes_GET_SIZE(model);
    } else if (PyUnicode_Check(model)) {
        if (!(json = PyUnicode_AsUTF8AndSize(model, &json_len)))
            return NULL;
        if ((size_t)json_len != strlen(json)) {
            PyErr_SetString(PyExc_ValueError, "model JSON contains a NUL character");
            return NULL;
        }
    } else {
        PyErr_SetString(PyExc_TypeError, "_compile wants Keras JSON (str) or ONNX (bytes)");
        return NULL;
    }
    rt_train_opts o;
    const char *metrics[RT_PY_MAX_METRICS];
    rt_output_loss outs[RT_CLIENT_MAX_OUTPUTS];
    const char *om[RT_CLIENT_MAX_OUTPUTS][RT_PY_MAX_METRICS];
    if (rt_py__train_opts(opts, &o, metrics) < 0 || rt_py__outputs(opts, &o, outs, om) < 0)
        return NULL;
    rt_client_compile_result r;
    memset(&r, 0, sizeof r);
    int rc;
    if (rt_py__lock(self, 1) < 0)
        return NULL;
    Py_INCREF(opts); /* keeps the option strings alive without the GIL */
    Py_INCREF(model);
    Py_BEGIN_ALLOW_THREADS if (onnx) rc =
        rt_client_compile_onnx(self->c, self->sid, json, (size_t)json_len, onnx_output, &o, &r);
    else rc = rt_client_compile_keras(self->c, self->sid, json, &o, &r);
    Py_END_ALLOW_THREADS Py_DECREF(model);
    PyObject *res = NULL, *timings = rt_py__record(self);
    if (!timings)
        goto out;
    if (rc < 0) {
        rt_py__fail(self, rc);
        goto out;
    }
    ProgramObject *p = PyObject_GC_New(ProgramObject, &ProgramType);
    if (!p)
        goto out;
    p->client = (ClientObject *)Py_NewRef(self);
    memcpy(p->id, r.program_id, sizeof p->id);
    p->last_timings = Py_NewRef(timings);
    p->report = rt_py__report(&r);
    PyObject_GC_Track(p);
    if (!p->report)
        Py_CLEAR(p);
    res = (PyObject *)p;
out:
    rt_py__unlock(self);
    Py_DECREF(opts);
    rt_client_compile_result_free(&r);
    return res;
}

/* Every Program call: the client is open, its lock is taken. */
static int rt_py__prog_begin(ProgramObject *self) { return rt_py__lock(self->client, 1); }

/* After a call: record timings; on rc < 0 raise. Returns 0 or -1. */
static int rt_py__prog_after(ProgramObject *self, int rc, int sig_installed)
{
    PyObject *t = rt_py__record(self->client);
    if (!t)
        return -1;
    Py_XSETREF(self->last_timings, Py_NewRef(t));
    if (rt_py__sig_raised(sig_installed))
        return -1;
    if (rc < 0) {
        rt_py__fail(self->client, rc);
        return -1;
    }
    return 0;
}

static PyObject *Program_evaluate(ProgramObject *self, PyObject *args)
{
    const char *ds;
    if (!PyArg_ParseTuple(args, "s:evaluate", &ds))
        return NULL;
    if (rt_py__prog_begin(self) < 0)
        return NULL;
    rt_client_metrics m;
    int rc;
    rt_client *c = self->client->c;
    const char *sid = self->client->sid;
    int inst = rt_py__sig_install(c);
    Py_BEGIN_ALLOW_THREADS rc = rt_client_evaluate(c, sid, self->id, ds, &m);
    Py_END_ALLOW_THREADS rt_py__sig_remove(inst);
    PyObject *res = NULL;
    if (rt_py__prog_after(self, rc, inst) == 0) {
        /* (loss, accuracy, samples, {metric: value}) */
        PyObject *vals = PyDict_New();
        for (int i = 0; vals && i < m.n_values; i++) {
            PyObject *v = PyFloat_FromDouble(m.values[i]);
            if (!v || PyDict_SetItemString(vals, m.value_name[i], v) < 0) {
                Py_XDECREF(v);
                Py_CLEAR(vals);
                break;
            }
            Py_DECREF(v);
        }
        if (vals)
            res = Py_BuildValue("(ddKN)", m.loss, m.accuracy, (unsigned long long)m.samples, vals);
    }
    rt_py__unlock(self->client);
    return res;
}

/* predict(x) with x an array, or the id of a dataset on the daemon (a
 * streamed one is read batch by batch there). */
static PyObject *Program_predict(ProgramObject *self, PyObject *args)
{
    PyObject *xo;
    if (!PyArg_ParseTuple(args, "O:predict", &xo))
        return NULL;
    if (PyUnicode_Check(xo)) {
        const char *ds = PyUnicode_AsUTF8(xo);
        if (!ds || rt_py__prog_begin(self) < 0)
            return NULL;
        rt_client_tensor out;
        memset(&out, 0, sizeof out);
        int rc;
        rt_client *c = self->client->c;
        const char *sid = self->client->sid;
        char *id = strdup(ds);
        if (!id) {
            rt_py__unlock(self->client);
            return PyErr_NoMemory();
        }
        int inst = rt_py__sig_install(c);
        Py_BEGIN_ALLOW_THREADS rt_client_next_timeout_ms(c, 0);
        rc = rt_client_predict_dataset(c, sid, self->id, id, &out);
        Py_END_ALLOW_THREADS rt_py__sig_remove(inst);
        free(id);
        PyObject *res = NULL;
        if (rt_py__prog_after(self, rc, inst) == 0)
            res = rt_py__tensor_to_numpy(&out);
        rt_py__unlock(self->client);
        rt_client_tensor_free(&out);
        return res;
    }
    Py_buffer xv;
    rt_client_array xa;
    if (rt_py__array(xo, "x", 0, &xv, &xa) < 0)
        return NULL;
    if (rt_py__prog_begin(self) < 0) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    rt_client_tensor out;
    memset(&out, 0, sizeof out);
    int rc;
    rt_client *c = self->client->c;
    const char *sid = self->client->sid;
    int inst = rt_py__sig_install(c);
    Py_BEGIN_ALLOW_THREADS rc = rt_client_predict(c, sid, self->id, &xa, &out);
    Py_END_ALLOW_THREADS rt_py__sig_remove(inst);
    PyObject *res = NULL;
    if (rt_py__prog_after(self, rc, inst) == 0)
        res = rt_py__tensor_to_numpy(&out);
    rt_py__unlock(self->client);
    rt_client_tensor_free(&out);
    PyBuffer_Release(&xv);
    return res;
}

/* get_weights() -> (global_step, [(name, ndarray), ...]) */
static PyObject *Program_get_weights(ProgramObject *self, PyObject *unused)
{
    if (rt_py__prog_begin(self) < 0)
        return NULL;
    rt_client_weights w;
    memset(&w, 0, sizeof w);
    int rc;
    rt_client *c = self->client->c;
    const char *sid = self->client->sid;
    Py_BEGIN_ALLOW_THREADS rc = rt_client_get_weights(c, sid, self->id, &w);
    Py_END_ALLOW_THREADS PyObject *res = NULL, *l = NULL;
    if (rt_py__prog_after(self, rc, 0) < 0)
        goto out;
    if (!(l = PyList_New((Py_ssize_t)w.n)))
        goto out;
    for (size_t i = 0; i < w.n; i++) {
        PyObject *a = rt_py__tensor_to_numpy(&w.t[i]);
        PyObject *item = a ? Py_BuildValue("(sN)", w.t[i].name ? w.t[i].name : "", a) : NULL;
        if (!item) {
            Py_CLEAR(l);
            goto out;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, item);
    }
    res = Py_BuildValue("(KNd)", (unsigned long long)w.global_step, l, (double)w.learning_rate);
out:
    rt_py__unlock(self->client);
    rt_client_weights_free(&w);
    return res;
}

/* control(learning_rate=0.0, stop=False, reset_states=False,
 * reset_layer=None) -> running: librtrain's rt_client_control outside a
 * fit (inside one, fit's on_event returns (learning_rate, stop) instead). */
static PyObject *Program_control(ProgramObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"learning_rate", "stop", "reset_states", "reset_layer", NULL};
    double lr = 0;
    int stop = 0, reset = 0;
    const char *layer = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|dppz:control", kwlist, &lr, &stop, &reset, &layer))
        return NULL;
    if (!(lr >= 0) || lr > 3.4e38) {
        PyErr_SetString(PyExc_ValueError, "learning_rate must be a finite number > 0");
        return NULL;
    }
    if (rt_py__prog_begin(self) < 0)
        return NULL;
    rt_client *c = self->client->c;
    rt_client_control_params p = {.session = self->client->sid,
                                  .program = self->id,
                                  .learning_rate = (float)lr,
                                  .stop = stop,
                                  .reset_states = reset,
                                  .reset_layer = layer};
    int rc, running = 0;
    Py_BEGIN_ALLOW_THREADS rc = rt_client_control(c, &p, &running);
    Py_END_ALLOW_THREADS PyObject *res = NULL;
    if (rt_py__prog_after(self, rc, 0) == 0)
        res = PyBool_FromLong(running);
    rt_py__unlock(self->client);
    return res;
}

/* export_onnx(onnx_bytes, output=None) -> bytes: the model with this
 * program's weights as its initializers */
static PyObject *Program_export_onnx(ProgramObject *self, PyObject *args)
{
    PyObject *model;
    const char *output = NULL;
    if (!PyArg_ParseTuple(args, "O!|z:export_onnx", &PyBytes_Type, &model, &output))
        return NULL;
    if (rt_py__prog_begin(self) < 0)
        return NULL;
    uint8_t *out = NULL;
    size_t len = 0;
    int rc;
    rt_client *c = self->client->c;
    const char *sid = self->client->sid;
    const char *data = PyBytes_AS_STRING(model);
    const size_t n = (size_t)PyBytes_GET_SIZE(model);
    Py_INCREF(model);
    Py_BEGIN_ALLOW_THREADS rc =
        rt_client_export_onnx(c, sid, self->id, data, n, output, &out, &len);
    Py_END_ALLOW_THREADS Py_DECREF(model);
    PyObject *res = NULL;
    if (rt_py__prog_after(self, rc, 0) == 0)
        res = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)len);
    rt_py__unlock(self->client);
    free(out);
    return res;
}

/* pull_state() -> bytes: the full training state (a daemon checkpoint). */
static PyObject *Program_pull_state(ProgramObject *self, PyObject *unused)
{
    if (rt_py__prog_begin(self) < 0)
        return NULL;
    rt_client_ckpt_info in;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc =
        rt_client_checkpoint(self->client->c, self->client->sid, self->id, RT_CKPT_PULL, &in);
    Py_END_ALLOW_THREADS PyObject *res = NULL;
    if (rt_py__prog_after(self, rc, 0) == 0)
        res = PyBytes_FromStringAndSize((const char *)in.state, (Py_ssize_t)in.state_len);
    free(in.state);
    rt_py__unlock(self->client);
    return res;
}

/* push_state(bytes, new=False) -> global_step: the state loaded into this
 * program in place (it must be a state of this program's model: a
 * FailedPrecondition otherwise), or with new=True resumed as a new program
 * of this session, which this object then is (the one it was is dropped
 * from the daemon). */
static PyObject *Program_push_state(ProgramObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"state", "new", NULL};
    Py_buffer b;
    int as_new = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|p:push_state", kws, &b, &as_new))
        return NULL;
    if (rt_py__prog_begin(self) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    rt_client_ckpt_info in;
    char id[RT_ID_MAX];
    int rc;
    rt_client *c = self->client->c;
    const char *sid = self->client->sid;
    Py_BEGIN_ALLOW_THREADS rc =
        as_new ? rt_client_restore_checkpoint(c, sid, b.buf, (size_t)b.len, id, &in)
               : rt_client_restore_checkpoint_into(c, sid, self->id, b.buf, (size_t)b.len, &in);
    Py_END_ALLOW_THREADS PyBuffer_Release(&b);
    PyObject *res = NULL;
    if (rt_py__prog_after(self, rc, 0) == 0) {
        if (as_new) {
            /* the one it was goes (at the unlock below): this object was
             * its only holder */
            rt_py__drop_program(self->client, self->id);
            snprintf(self->id, sizeof self->id, "%s", id);
        }
        res = PyLong_FromUnsignedLongLong(in.global_step);
    }
    rt_py__unlock(self->client);
    return res;
}

/* set_weights([(name, float32 C-contiguous array), ...]); no copies. */
static PyObject *Program_set_weights(ProgramObject *self, PyObject *args)
{
    PyObject *lst;
    if (!PyArg_ParseTuple(args, "O!:set_weights", &PyList_Type, &lst))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lst);
    Py_buffer *views = PyMem_Calloc((size_t)(n ? n : 1), sizeof *views);
    rt_client_tensor *ts = PyMem_Calloc((size_t)(n ? n : 1), sizeof *ts);
    Py_ssize_t got = 0;
    PyObject *res = NULL;
    if (!views || !ts) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < n; got++) {
        PyObject *item = PyList_GET_ITEM(lst, got);
        const char *name;
        PyObject *arr;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "sO", &name, &arr)) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_TypeError, "set_weights wants a list of (name, array)");
            }
            goto out;
        }
        if (PyObject_GetBuffer(arr, &views[got], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto out;
        const char *f = views[got].format ? views[got].format : "B";
        if (*f == '<' || *f == '=' || *f == '@')
            f++;
        if (strcmp(f, "f") || views[got].itemsize != 4 || views[got].ndim > RT_CLIENT_MAX_DIMS) {
            PyErr_Format(PyExc_TypeError, "weight %s must be a float32 array", name);
            PyBuffer_Release(&views[got]);
            goto out;
        }
        ts[got].name = (char *)name; /* only read by the library */
        ts[got].dtype = RT_DTYPE_F32;
        ts[got].ndim = views[got].ndim;
        for (int k = 0; k < views[got].ndim; k++)
            ts[got].shape[k] = views[got].shape[k];
        ts[got].data = views[got].buf;
        ts[got].nbytes = (size_t)views[got].len;
    }
    if (rt_py__prog_begin(self) < 0)
        goto out;
    int rc;
    rt_client *c = self->client->c;
    const char *sid = self->client->sid;
    Py_INCREF(lst);
    Py_BEGIN_ALLOW_THREADS rc = rt_client_set_weights(c, sid, self->id, ts, (size_t)n);
    Py_END_ALLOW_THREADS Py_DECREF(lst);
    if (rt_py__prog_after(self, rc, 0) == 0)
        res = Py_NewRef(Py_None);
    rt_py__unlock(self->client);
out:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(ts);
    return res;
}

/* ------------------------------------------------------------ SIGINT */

/* Only the main thread runs Python signal handlers, so only a fit on the
 * main thread chains a handler; one fit at a time can own it. */
static rt_client *volatile rt_py__sig_client;
static volatile sig_atomic_t rt_py__sig_fired;
static struct sigaction rt_py__sig_old;

static void rt_py__on_sigint(int sig, siginfo_t *si, void *uc)
{
    rt_client *c = rt_py__sig_client;
    rt_py__sig_fired = 1;
    if (c)
        rt_client_cancel(c); /* async-signal-safe: sets a flag */
    /* Chain to the previous handler (Python's trips its flag, so the
     * KeyboardInterrupt, or the user's own handler, runs after the fit). */
    if (rt_py__sig_old.sa_flags & SA_SIGINFO) {
        if (rt_py__sig_old.sa_sigaction)
            rt_py__sig_old.sa_sigaction(sig, si, uc);
    } else if (rt_py__sig_old.sa_handler != SIG_DFL && rt_py__sig_old.sa_handler != SIG_IGN &&
               rt_py__sig_old.sa_handler) {
        rt_py__sig_old.sa_handler(sig);
    }
}

static int rt_py__sig_install(rt_client *c)
{
    if (!_PyOS_IsMainThread() || rt_py__sig_client)
        return 0;
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) < 0 || cur.sa_handler == SIG_IGN)
        return 0;
    rt_py__sig_fired = 0;
    rt_py__sig_old = cur;
    rt_py__sig_client = c;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = rt_py__on_sigint;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) < 0) {
        rt_py__sig_client = NULL;
        return 0;
    }
    return 1;
}

static void rt_py__sig_remove(int installed)
{
    if (!installed)
        return;
    sigaction(SIGINT, &rt_py__sig_old, NULL);
    rt_py__sig_client = NULL;
}

/* After rt_py__sig_remove: did a Ctrl-C stop the call? Then run Python's
 * handler now (normally it raises KeyboardInterrupt) and return 1 with the
 * exception set. A handler that does not raise lets the call's own result
 * stand (0). */
static int rt_py__sig_raised(int installed)
{
    if (!installed || !rt_py__sig_fired)
        return 0;
    rt_py__sig_fired = 0;
    if (PyErr_CheckSignals() < 0)
        return 1;
    if (rt_py__sig_old.sa_handler == SIG_DFL) {
        PyErr_SetNone(PyExc_KeyboardInterrupt);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ fit */

/* One fit: progress display (librtrain's rt_progress, as the CLI's), history
 * and per-call timings. Touched only with the GIL held. */
typedef struct fitctx {
    ProgramObject *prog;
    float lr;           /* > 0: the learning rate from the first step on */
    PyThreadState *ts;  /* saved thread state while the GIL is released */
    PyObject *history;  /* dict: loss, accuracy, val_loss, val_accuracy */
    PyObject *timings;  /* list of per-call dicts */
    const char *metric; /* "accuracy" or NULL */
    rt_progress bar;
    uint64_t last_call_ns;       /* start_ns of the last call put in timings */
    int stop;                    /* an exception is pending (fetched) */
    int stopped;                 /* a Control stop ended the fit (RT_FIT_DONE) */
    uint64_t end_step;           /* RT_FIT_DONE's global step */
    int sig;                     /* this fit owns the SIGINT chain */
    uint32_t run_last;           /* the run's last epoch (1-based) when the fit
                                goes on after it, else 0 */
    uint64_t epoch_base;         /* epochs of the fit before this run */
    uint64_t run_ends;           /* epoch ends this run delivered */
    uint32_t ckpt_steps, ckpt_s; /* per-fit checkpoint interval, 0 = the daemon's */
    PyObject *on_event;          /* callable(kind, dict) -> stop, or NULL */
    PyObject *et, *ev, *etb;
} fitctx;

/* sys.stdout.write + flush, so capsys and notebooks see the output. */
static int rt_py__write(void *user, const char *s)
{
    (void)user;
    PyObject *out = PySys_GetObject("stdout"); /* borrowed */
    if (!out || out == Py_None)
        return 0;
    PyObject *r = PyObject_CallMethod(out, "write", "s", s);
    if (!r)
        return -1;
    Py_DECREF(r);
    /* A stream without flush is fine; any other failure (notably a
     * KeyboardInterrupt raised inside ipykernel's flush) is the caller's. */
    if (!PyObject_HasAttrString(out, "flush"))
        return 0;
    r = PyObject_CallMethod(out, "flush", NULL);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int rt_py__hist_append(PyObject *h, const char *key, double v)
{
    PyObject *l = PyDict_GetItemString(h, key);
    if (!l) {
        if (!(l = PyList_New(0)) || PyDict_SetItemString(h, key, l) < 0) {
            Py_XDECREF(l);
            return -1;
        }
        Py_DECREF(l);
    }
    PyObject *x = PyFloat_FromDouble(v);
    if (!x)
        return -1;
    int r = PyList_Append(l, x);
    Py_DECREF(x);
    return r;
}

/* An epoch ended: its figures go into the history under Keras' keys. */
static int rt_py__epoch_done(fitctx *f, const rt_client_epoch *ep)
{
    const char *mn = f->metric;
    char key[80];
    if (rt_py__hist_append(f->history, "loss", ep->train.loss) < 0)
        return -1;
    if (mn && rt_py__hist_append(f->history, mn, ep->train.accuracy) < 0)
        return -1;
    for (int i = 0; i < ep->train.n_values; i++)
        if (rt_py__hist_append(f->history, ep->train.value_name[i], ep->train.values[i]) < 0)
            return -1;
    if (ep->has_val) {
        if (rt_py__hist_append(f->history, "val_loss", ep->val.loss) < 0)
            return -1;
        snprintf(key, sizeof key, "val_%s", mn ? mn : "");
        if (mn && rt_py__hist_append(f->history, key, ep->val.accuracy) < 0)
            return -1;
        for (int i = 0; i < ep->val.n_values; i++) {
            snprintf(key, sizeof key, "val_%s", ep->val.value_name[i]);
            if (rt_py__hist_append(f->history, key, ep->val.values[i]) < 0)
                return -1;
        }
    }
    return 0;
}

/* With the GIL: stop on a pending exception (KeyboardInterrupt or a failed
 * write). Returns 1 to stop. */
static int rt_py__poll(fitctx *f)
{
    if (!f->stop && PyErr_CheckSignals() < 0)
        f->stop = 1;
    if (f->stop && PyErr_Occurred())
        PyErr_Fetch(&f->et, &f->ev, &f->etb);
    return f->stop;
}

/* A call's account into the fit's timings list and last_timings. */
static int rt_py__add_timings(fitctx *f, const rt_client_timings *t)
{
    PyObject *d = rt_py__timings_dict(t);
    if (!d)
        return -1;
    Py_XSETREF(f->prog->client->last_timings, d);
    Py_XSETREF(f->prog->last_timings, Py_NewRef(d));
    f->last_call_ns = t->start_ns;
    return PyList_Append(f->timings, d);
}

/* After the fit: the last call's account, unless an event brought it (the
 * Fit stream's, or a call that failed or was cancelled mid-flight). */
static void rt_py__add_last_timings(fitctx *f)
{
    rt_client_timings t;
    if (rt_client_last_timings(f->prog->client->c, &t) < 0 || t.start_ns == f->last_call_ns)
        return;
    if (rt_py__add_timings(f, &t) < 0 && !f->stop) {
        f->stop = 1;
        PyErr_Fetch(&f->et, &f->ev, &f->etb);
    } else if (PyErr_Occurred()) {
        PyErr_Clear(); /* an earlier exception is the one to raise */
    }
}

/* on_event's (learning_rate, stop) answer: a Control call on the daemon,
 * made from inside the stream, which goes on (the daemon ends it after the
 * next step when stop is set). learning_rate 0: unchanged. Returns 0, or -1
 * with an exception. */
static int rt_py__control_from(fitctx *f, PyObject *t)
{
    double lr;
    int stop;
    if (!PyArg_ParseTuple(t, "dp:on_event's (learning_rate, stop)", &lr, &stop))
        return -1;
    if (!(lr >= 0) || lr > 3.4e38) {
        PyErr_SetString(PyExc_ValueError, "learning_rate must be a finite number > 0");
        return -1;
    }
    if (lr == 0 && !stop)
        return 0;
    rt_client *c = f->prog->client->c;
    rt_client_control_params p = {.session = f->prog->client->sid,
                                  .program = f->prog->id,
                                  .learning_rate = (float)lr,
                                  .stop = stop};
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = rt_client_control(c, &p, NULL);
    Py_END_ALLOW_THREADS if (rc < 0)
    {
        rt_py__raise(rc, rt_client_grpc_status(c), rt_client_errmsg(c));
        return -1;
    }
    return 0;
}

/* on_event("batch", {...}) after a progress event, on_event("epoch",
 * {...}) after an epoch end: a true result stops the run at the next step
 * boundary. Epoch numbers are 0-based over the whole fit, as Keras' (and
 * as History and on_epoch_end count): the run's epoch ends so far on top of
 * first_epoch. Not the events' own epoch, which a Fit stream counts from
 * the program's first fit and a RunSteps loop from this run. */
static int rt_py__on_event(fitctx *f, const rt_client_fit_event *ev)
{
    PyObject *d = NULL, *r = NULL;
    const char *kind;
    int rc = -1;
    const unsigned long long epoch = f->epoch_base + f->run_ends;
    if (ev->kind == RT_FIT_PROGRESS) {
        kind = "batch";
        d = Py_BuildValue("{s:K,s:K,s:K,s:K,s:d,s:d,s:d}", "epoch", epoch, "batch",
                          (unsigned long long)(ev->step_in_epoch ? ev->step_in_epoch - 1 : 0),
                          "steps_per_epoch", (unsigned long long)ev->steps_per_epoch, "step",
                          (unsigned long long)ev->step, "loss", (double)ev->loss, "accuracy",
                          (double)ev->accuracy, "learning_rate", (double)ev->learning_rate);
    } else if (ev->kind == RT_FIT_EPOCH_END) {
        const rt_client_epoch *e = &ev->epoch_end;
        kind = "epoch";
        d = Py_BuildValue("{s:K,s:K,s:d,s:d,s:i,s:d,s:d,s:K}", "epoch", epoch, "step",
                          (unsigned long long)e->steps, "loss", e->train.loss, "accuracy",
                          e->train.accuracy, "has_val", e->has_val, "val_loss", e->val.loss,
                          "val_accuracy", e->val.accuracy, "samples",
                          (unsigned long long)e->train.samples);
    } else {
        return 0;
    }
    if (d && (r = PyObject_CallFunction(f->on_event, "sO", kind, d))) {
        if (PyTuple_Check(r))
            rc = rt_py__control_from(f, r);
        else
            rc = PyObject_IsTrue(r);
    }
    Py_XDECREF(d);
    Py_XDECREF(r);
    return rc;
}

/* Every event of both drivers: timings, history, progress, stop requests. */
static int rt_py__fit_cb(const rt_client_fit_event *ev, void *user)
{
    fitctx *f = user;
    PyEval_RestoreThread(f->ts);
    int want_stop = 0;
    if (ev->kind == RT_FIT_DONE && ev->stopped) {
        f->stopped = 1;
        f->end_step = ev->step;
    }
    if (!f->stop) {
        int r = 0;
        if (ev->call)
            r = rt_py__add_timings(f, ev->call);
        if (ev->kind == RT_FIT_RESUMED) /* librtrain reattached */
            PySys_WriteStderr("daemon restarted; resuming at epoch %llu step %llu\n",
                              (unsigned long long)(f->epoch_base + ev->epoch),
                              (unsigned long long)ev->step);
        if (r == 0 && ev->kind == RT_FIT_EPOCH_END)
            r = rt_py__epoch_done(f, &ev->epoch_end);
        /* A run of one epoch: the next epoch's header is the next run's. */
        if (r == 0 && f->run_last && ev->kind == RT_FIT_EPOCH_END &&
            f->bar.mode == RT_PROGRESS_BAR && f->bar.epoch == f->run_last)
            f->bar.epochs = f->bar.epoch;
        if (r == 0)
            r = rt_progress_event(&f->bar, ev);
        if (r == 0 && f->on_event && (r = rt_py__on_event(f, ev)) > 0) {
            want_stop = 1;
            r = 0;
        }
        if (ev->kind == RT_FIT_EPOCH_END)
            f->run_ends++;
        if (r < 0)
            f->stop = 1;
    }
    int stop =
        rt_py__poll(f) || want_stop || (f->sig && rt_py__sig_fired) || f->prog->client->cancel_req;
    f->ts = PyEval_SaveThread();
    return stop;
}

/* One Fit call: the daemon runs every epoch and streams events. */
static int rt_py__fit_stream(fitctx *f, const char *ds, const char *val, uint32_t epochs,
                             uint64_t spe, uint32_t progress_every)
{
    rt_client *c = f->prog->client->c;
    rt_client_fit_params p = {.session = f->prog->client->sid,
                              .program = f->prog->id,
                              .dataset = ds,
                              .val_dataset = val,
                              .epochs = epochs,
                              .steps_per_epoch = (uint32_t)spe,
                              .progress_every = progress_every,
                              .learning_rate = f->lr,
                              .checkpoint_every_steps = f->ckpt_steps,
                              .checkpoint_every_s = f->ckpt_s};
    f->ts = PyEval_SaveThread();
    rt_client_next_timeout_ms(c, 0); /* a fit lasts as long as it lasts */
    int rc = rt_client_fit(c, &p, rt_py__fit_cb, f);
    PyEval_RestoreThread(f->ts);
    return rc;
}

/* K steps per RunSteps call (0 = auto), calls pipelined: librtrain's loop,
 * the CLI's --steps-per-call. */
static int rt_py__fit_steps(fitctx *f, const char *ds, const char *val, uint32_t epochs,
                            uint64_t spe, uint64_t k)
{
    rt_client *c = f->prog->client->c;
    rt_client_train_params p = {.session = f->prog->client->sid,
                                .program = f->prog->id,
                                .dataset = ds,
                                .val_dataset = val,
                                .epochs = epochs,
                                .steps_per_epoch = spe,
                                .steps_per_call = k,
                                .learning_rate = f->lr,
                                /* fit() comes here for a whole run only without callbacks (they
         * get one call per epoch): nothing stops at an epoch end, so the
         * window stays full across them */
                                .across_epochs = 1,
                                .checkpoint_every_steps = f->ckpt_steps,
                                .checkpoint_every_s = f->ckpt_s};
    f->ts = PyEval_SaveThread();
    rt_client_next_timeout_ms(c, 0); /* for every call of the run */
    int rc = rt_client_train_steps(c, &p, rt_py__fit_cb, f);
    PyEval_RestoreThread(f->ts);
    return rc;
}

/* fit(dataset, val_dataset, epochs, steps_per_epoch, steps_per_execution,
 *     verbose, history, timings, metric_name=None, progress_every=1, ...,
 *     checkpoint_every_steps=0, checkpoint_every_s=0)
 * steps_per_execution: 0 = one Fit stream, K or "auto" = librtrain's
 * steps-per-call loop; verbose 1 = bar, 2 = a line per epoch, 0 = silent.
 * -> "done" | "cancelled" (client.cancel() from another thread).
 * Raises KeyboardInterrupt (after the remote fit stopped) on Ctrl-C. The
 * history dict and timings list are filled in place, so a caller still has
 * the epochs completed before an interrupt. */
static PyObject *Program_fit(ProgramObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dataset",
                             "val_dataset",
                             "epochs",
                             "steps_per_epoch",
                             "steps_per_execution",
                             "verbose",
                             "history",
                             "timings",
                             "metric_name",
                             "progress_every",
                             "on_event",
                             "first_epoch",
                             "total_epochs",
                             "learning_rate",
                             "checkpoint_every_steps",
                             "checkpoint_every_s",
                             NULL};
    const char *ds, *val = NULL;
    unsigned int epochs;
    unsigned long long spe, spx = 0;
    int verbose, steps_loop = 0;
    PyObject *history, *timings, *metric = Py_None, *spx_o;
    unsigned int progress_every = 1, first_epoch = 0, total_epochs = 0;
    PyObject *on_event = Py_None;
    double lr = 0;
    unsigned int ckpt_steps = 0, ckpt_s = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "szIKOiO!O!|OIOIIdII:fit", kwlist, &ds, &val,
                                     &epochs, &spe, &spx_o, &verbose, &PyDict_Type, &history,
                                     &PyList_Type, &timings, &metric, &progress_every, &on_event,
                                     &first_epoch, &total_epochs, &lr, &ckpt_steps, &ckpt_s))
        return NULL;
    if (!(lr >= 0) || lr > 3.4e38) {
        PyErr_SetString(PyExc_ValueError, "learning_rate must be a finite number > 0");
        return NULL;
    }
    if (on_event != Py_None && !PyCallable_Check(on_event)) {
        PyErr_SetString(PyExc_TypeError, "on_event must be callable or None");
        return NULL;
    }
    if (total_epochs && first_epoch + epochs > total_epochs) {
        PyErr_SetString(PyExc_ValueError, "first_epoch + epochs exceeds total_epochs");
        return NULL;
    }
    /* steps_per_execution: 0 = one Fit stream, K, or "auto" (K = 0 for
     * rt_client_train_steps). */
    if (PyUnicode_Check(spx_o)) {
        if (PyUnicode_CompareWithASCIIString(spx_o, "auto") != 0) {
            PyErr_SetString(PyExc_ValueError, "steps_per_execution must be an int or 'auto'");
            return NULL;
        }
        steps_loop = 1;
    } else {
        spx = PyLong_AsUnsignedLongLong(spx_o);
        if (PyErr_Occurred())
            return NULL;
        steps_loop = spx != 0;
    }
    if (epochs == 0)
        return PyUnicode_FromString("done");
    if (steps_loop && !spe) {
        PyErr_SetString(PyExc_ValueError, "steps_per_execution needs steps_per_epoch");
        return NULL;
    }
    if (spe > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "steps_per_epoch is too large");
        return NULL;
    }
    if (metric != Py_None && !PyUnicode_Check(metric)) {
        PyErr_SetString(PyExc_TypeError, "metric_name must be a string or None");
        return NULL;
    }
    if (rt_py__prog_begin(self) < 0)
        return NULL;
    fitctx f;
    memset(&f, 0, sizeof f);
    f.prog = self;
    f.lr = (float)lr;
    f.ckpt_steps = ckpt_steps;
    f.ckpt_s = ckpt_s;
    f.history = history;
    f.timings = timings;
    f.metric = metric == Py_None ? NULL : PyUnicode_AsUTF8(metric);
    if (metric != Py_None && !f.metric) {
        rt_py__unlock(self->client);
        return NULL;
    }
    /* first_epoch (0-based) and total_epochs place this run inside a
     * longer fit (Keras' initial_epoch; one run per epoch with callbacks). */
    uint32_t shown = total_epochs ? total_epochs : first_epoch + epochs;
    rt_progress_init(&f.bar,
                     verbose == 1   ? RT_PROGRESS_BAR
                     : verbose == 2 ? RT_PROGRESS_LINES
                                    : RT_PROGRESS_OFF,
                     shown, spe, f.metric, rt_py__write, NULL);
    f.bar.epoch = first_epoch + 1;
    f.epoch_base = first_epoch;
    f.run_last = first_epoch + epochs < shown ? first_epoch + epochs : 0;
    f.on_event = on_event == Py_None ? NULL : on_event;
    PyObject *res = NULL;
    self->client->cancel_req = 0;
    int installed = rt_py__sig_install(self->client->c);
    f.sig = installed;
    int rc = 0;
    if (rt_progress_begin(&f.bar) < 0)
        goto out;
    if (steps_loop)
        rc = rt_py__fit_steps(&f, ds, val, epochs, spe, spx);
    else
        rc = rt_py__fit_stream(&f, ds, val, epochs, spe,
                               verbose == 1 || f.on_event ? progress_every : 0);
    rt_py__sig_remove(installed);
    installed = 0;
    rt_py__add_last_timings(&f);
    if (rt_progress_finish(&f.bar) < 0) {
        if (f.et)
            PyErr_Clear();
        else
            PyErr_Fetch(&f.et, &f.ev, &f.etb);
    }
    if (f.et) {
        PyErr_Restore(f.et, f.ev, f.etb);
        goto out;
    }
    if (f.sig && rt_py__sig_fired) {
        /* Python's handler was chained: run it now (normally it raises
         * KeyboardInterrupt). A handler that does not raise still ends the
         * fit early, as the user asked. */
        rt_py__sig_fired = 0;
        if (PyErr_CheckSignals() < 0)
            goto out;
        if (rt_py__sig_old.sa_handler == SIG_DFL) {
            PyErr_SetNone(PyExc_KeyboardInterrupt);
            goto out;
        }
        res = PyUnicode_FromString("cancelled");
        goto out;
    }
    if (rc == RT_ECANCELLED || self->client->cancel_req) {
        res = PyUnicode_FromString("cancelled");
        goto out;
    }
    if (rc < 0) {
        rt_py__fail(self->client, rc);
        goto out;
    }
    if (f.stopped) {
        PyObject *st = PyLong_FromUnsignedLongLong(f.end_step);
        if (!st || PyObject_SetAttrString(history, "stopped_at_step", st) < 0) {
            PyErr_Clear(); /* a plain dict as history: the status says it */
        }
        Py_XDECREF(st);
    }
    res = PyUnicode_FromString(f.stopped ? "stopped" : "done");
out:
    rt_py__sig_remove(installed);
    rt_py__unlock(self->client);
    return res;
}

static PyObject *Program_get_id(ProgramObject *self, void *closure)
{
    return PyUnicode_FromString(self->id);
}

static PyObject *Program_get_report(ProgramObject *self, void *closure)
{
    return Py_NewRef(self->report);
}

static PyObject *Program_get_last_timings(ProgramObject *self, void *closure)
{
    return Py_NewRef(self->last_timings);
}

/* ------------------------------------------------------------ tables */

static PyMethodDef Client_methods[] = {
    {"info", (PyCFunction)Client_info, METH_NOARGS,
     "info() -> dict: the daemon's version, device, limits, ops, losses."},
    {"ping", (PyCFunction)(void (*)(void))Client_ping, METH_VARARGS | METH_KEYWORDS,
     "ping(payload_bytes=0) -> round trip in seconds."},
    {"close", (PyCFunction)Client_close, METH_NOARGS,
     "close(): end the session and drop the connection (idempotent)."},
    {"cancel", (PyCFunction)Client_cancel, METH_NOARGS,
     "cancel(): stop the call in flight (from any thread)."},
    {"set_reattach", (PyCFunction)Client_set_reattach, METH_VARARGS,
     "set_reattach(seconds): wait this long for a restarted daemon during a fit"},
    {"trace", (PyCFunction)Client_trace, METH_VARARGS,
     "trace(on=True): start (clearing) or stop keeping every call's timings."},
    {"trace_calls", (PyCFunction)Client_trace_calls, METH_NOARGS,
     "trace_calls() -> list of timing dicts kept since trace()."},
    {"trace_write", (PyCFunction)Client_trace_write, METH_VARARGS,
     "trace_write(path): write the traced calls as Chrome trace-event JSON."},
    {"_upload_idx", (PyCFunction)(void (*)(void))Client_upload_idx, METH_VARARGS | METH_KEYWORDS,
     "_upload_idx(images, labels, normalize=True, name='data', storage=0, shuffle_buffer=0) -> dataset dict. IDX files "
     "(MNIST, Fashion-MNIST; .gz or not) uploaded as they are."},
    {"_upload_data", (PyCFunction)(void (*)(void))Client_upload_data, METH_VARARGS | METH_KEYWORDS,
     "_upload_data(source, features=None, label=None, name='data', skip_bad=False, "
     "height=0, width=0, channels=0, resize=0, mean=(), std=(), crop_pad=0, flip=False, "
     "brightness=0, contrast=0) -> dataset dict. TFRecord files (a path, a glob or a "
     "list, with a features spec) or an image folder (features None)."},
    {"_upload", (PyCFunction)(void (*)(void))Client_upload, METH_VARARGS | METH_KEYWORDS,
     "_upload(x, y=None, name='data') -> dataset dict. x: float32, y: int32 "
     "or float32, both C-contiguous (uploaded without a copy)."},
    {"_compile", (PyCFunction)Client_compile, METH_VARARGS,
     "_compile(keras_json | onnx_bytes, options, onnx_output=None) -> Program."},
    {NULL}};

static PyGetSetDef Client_getset[] = {
    {"last_timings", (getter)Client_get_last_timings, NULL,
     "Timing breakdown (ns) of the last call on this client.", NULL},
    {"target", (getter)Client_get_target, NULL, "host:port", NULL},
    {"session_id", (getter)Client_get_session, NULL, "the daemon session", NULL},
    {"closed", (getter)Client_get_closed, NULL, "close() was called", NULL},
    {NULL}};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rtrain._rtrain.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Client(target=None, timeout=60.0, name='python'): a session "
              "on one rtraind.",
    .tp_new = Client_new,
    .tp_init = (initproc)Client_init,
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_traverse = (traverseproc)Client_traverse,
    .tp_clear = (inquiry)Client_clear,
    .tp_methods = Client_methods,
    .tp_getset = Client_getset,
};

static PyMethodDef Program_methods[] = {
    {"fit", (PyCFunction)(void (*)(void))Program_fit, METH_VARARGS | METH_KEYWORDS,
     "fit(dataset, val_dataset, epochs, steps_per_epoch, steps_per_execution, "
     "verbose, history, timings, metric_name=None, progress_every=1)"},
    {"evaluate", (PyCFunction)Program_evaluate, METH_VARARGS,
     "evaluate(dataset_id) -> (loss, accuracy, samples)"},
    {"predict", (PyCFunction)Program_predict, METH_VARARGS,
     "predict(x float32 C-contiguous) -> ndarray"},
    {"get_weights", (PyCFunction)Program_get_weights, METH_NOARGS,
     "get_weights() -> (global_step, [(name, ndarray), ...])"},
    {"control", (PyCFunction)(void (*)(void))Program_control, METH_VARARGS | METH_KEYWORDS,
     "control(learning_rate=0.0, stop=False) -> running"},
    {"set_weights", (PyCFunction)Program_set_weights, METH_VARARGS,
     "set_weights([(name, float32 array), ...])"},
    {"export_onnx", (PyCFunction)Program_export_onnx, METH_VARARGS,
     "export_onnx(onnx_bytes, output=None) -> bytes"},
    {"pull_state", (PyCFunction)Program_pull_state, METH_NOARGS,
     "pull_state() -> bytes (weights, optimizer, cursor, counters)"},
    {"push_state", (PyCFunction)(void (*)(void))Program_push_state, METH_VARARGS | METH_KEYWORDS,
     "push_state(bytes, new=False) -> global_step; the state loaded into this program (new: "
     "resumed as a new program, which this object then is)"},
    {NULL}};

static PyGetSetDef Program_getset[] = {
    {"id", (getter)Program_get_id, NULL, "program id", NULL},
    {"report", (getter)Program_get_report, NULL, "compile report", NULL},
    {"last_timings", (getter)Program_get_last_timings, NULL,
     "Timing breakdown (ns) of this program's last call.", NULL},
    {NULL}};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rtrain._rtrain.Program",
    .tp_basicsize = sizeof(ProgramObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A compiled program on the daemon (made by Client._compile).",
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_traverse = (traverseproc)Program_traverse,
    .tp_clear = (inquiry)Program_clear,
    .tp_methods = Program_methods,
    .tp_getset = Program_getset,
};

static PyObject *mod_strerror(PyObject *m, PyObject *args)
{
    int rc;
    if (!PyArg_ParseTuple(args, "i:strerror", &rc))
        return NULL;
    return Py_BuildValue("(ss)", rt_err_name(rc), rt_strerror(rc));
}

/* ------------------------------------------------------------ TensorBoard */

/* rtrain.callbacks.TensorBoard's writer: librtrain's rt_tb_log (the CLI's
 * --tensorboard writes through the same code), held in a capsule. */
#define RT_PY_TB "rtrain._rtrain.tb_log"

/* The capsule's pointer: a capsule's own pointer can never be NULL, and a
 * closed log must stay a valid object. */
typedef struct {
    rt_tb_log *l;
} rt_py_tb;

static void tb_capsule_free(PyObject *cap)
{
    rt_py_tb *h = PyCapsule_GetPointer(cap, RT_PY_TB);
    if (h) {
        rt_tb_log_close(h->l);
        PyMem_Free(h);
    }
}

static rt_tb_log *tb_get(PyObject *cap)
{
    rt_py_tb *h = PyCapsule_GetPointer(cap, RT_PY_TB);
    if (!h)
        return NULL;
    if (!h->l)
        PyErr_SetString(PyExc_ValueError, "the TensorBoard log is closed");
    return h->l;
}

static PyObject *tb_raise(rt_tb_log *l)
{
    PyErr_SetString(PyExc_OSError, rt_tb_log_error(l));
    return NULL;
}

static PyObject *mod_tb_open(PyObject *m, PyObject *args)
{
    PyObject *path;
    if (!PyArg_ParseTuple(args, "O&:tb_open", PyUnicode_FSConverter, &path))
        return NULL;
    char err[512];
    rt_tb_log *l;
    int rc = rt_tb_log_open(PyBytes_AS_STRING(path), &l, err, sizeof err);
    Py_DECREF(path);
    if (rc < 0) {
        PyErr_SetString(rc == RT_EINVAL ? PyExc_ValueError : PyExc_OSError, err);
        return NULL;
    }
    rt_py_tb *h = PyMem_Malloc(sizeof *h);
    if (!h) {
        rt_tb_log_close(l);
        return PyErr_NoMemory();
    }
    h->l = l;
    PyObject *cap = PyCapsule_New(h, RT_PY_TB, tb_capsule_free);
    if (!cap) {
        rt_tb_log_close(l);
        PyMem_Free(h);
    }
    return cap;
}

static PyObject *mod_tb_epoch(PyObject *m, PyObject *args)
{
    PyObject *cap;
    long long epoch;
    const char *name;
    double v;
    if (!PyArg_ParseTuple(args, "OLsd:tb_epoch", &cap, &epoch, &name, &v))
        return NULL;
    rt_tb_log *l = tb_get(cap);
    if (!l)
        return NULL;
    if (rt_tb_log_epoch(l, epoch, name, v) < 0)
        return tb_raise(l);
    Py_RETURN_NONE;
}

/* A History.timings dict (rt_py__timings_dict's keys) back into the struct. */
static PyObject *mod_tb_call(PyObject *m, PyObject *args)
{
    PyObject *cap, *d;
    if (!PyArg_ParseTuple(args, "OO!:tb_call", &cap, &PyDict_Type, &d))
        return NULL;
    rt_tb_log *l = tb_get(cap);
    if (!l)
        return NULL;
    rt_client_timings t;
    memset(&t, 0, sizeof t);
    PyObject *meth = PyDict_GetItemString(d, "method");
    t.method = meth && PyUnicode_Check(meth) ? PyUnicode_AsUTF8(meth) : "call";
    if (!t.method)
        return NULL;
    PyObject *hs = PyDict_GetItemString(d, "has_server");
    t.has_server = hs && PyObject_IsTrue(hs) == 1;
    static const struct {
        const char *k;
        size_t off;
    } f[] = {
#define RT_PY_TBF(x) {#x, offsetof(rt_client_timings, x)}
        RT_PY_TBF(queue_ns),        RT_PY_TBF(decode_ns),        RT_PY_TBF(compile_ns),
        RT_PY_TBF(execute_ns),      RT_PY_TBF(encode_ns),        RT_PY_TBF(client_encode_ns),
        RT_PY_TBF(round_trip_ns),   RT_PY_TBF(client_decode_ns), RT_PY_TBF(wire_ns),
        RT_PY_TBF(unattributed_ns),
#undef RT_PY_TBF
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        PyObject *v = PyDict_GetItemString(d, f[i].k);
        if (!v)
            continue;
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (PyErr_Occurred())
            return NULL;
        *(uint64_t *)((char *)&t + f[i].off) = u;
    }
    if (rt_tb_log_call(l, &t) < 0)
        return tb_raise(l);
    Py_RETURN_NONE;
}

static PyObject *mod_tb_close(PyObject *m, PyObject *args)
{
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O:tb_close", &cap))
        return NULL;
    rt_py_tb *h = PyCapsule_GetPointer(cap, RT_PY_TB);
    if (!h)
        return NULL;
    if (!h->l)
        Py_RETURN_NONE; /* closed already */
    char msg[256];
    snprintf(msg, sizeof msg, "%s", rt_tb_log_error(h->l));
    int rc = rt_tb_log_close(h->l);
    h->l = NULL;
    if (rc < 0) {
        PyErr_SetString(PyExc_OSError, *msg ? msg : "tensorboard: cannot close the event files");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* xxh3_64(buffer) -> int: the XXH3-64 a daemon checkpoint ends with
 * (server/durable/rt_ckpt.c), for a state the client edits before pushing
 * it (saving.py writes a .keras file's optimizer variables into one). */
static PyObject *mod_xxh3_64(PyObject *m, PyObject *args)
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*:xxh3_64", &b))
        return NULL;
    XXH64_hash_t h;
    Py_BEGIN_ALLOW_THREADS h = XXH3_64bits(b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS PyBuffer_Release(&b);
    return PyLong_FromUnsignedLongLong((unsigned long long)h);
}

static PyMethodDef module_methods[] = {
    {"strerror", mod_strerror, METH_VARARGS, "strerror(code) -> (name, text) for an RT_E* code."},
    {"tb_open", mod_tb_open, METH_VARARGS, "tb_open(log_dir) -> a TensorBoard log (rtrain_tb.h)."},
    {"tb_epoch", mod_tb_epoch, METH_VARARGS,
     "tb_epoch(log, epoch, name, value): Keras' epoch_<name> scalar."},
    {"tb_call", mod_tb_call, METH_VARARGS,
     "tb_call(log, timings): one call's timing/<Method>/<part>_ms scalars."},
    {"tb_close", mod_tb_close, METH_VARARGS, "tb_close(log)."},
    {"xxh3_64", mod_xxh3_64, METH_VARARGS, "xxh3_64(buffer) -> XXH3-64 of the bytes."},
    {NULL}};

static struct PyModuleDef rtrain_module = {
    PyModuleDef_HEAD_INIT, "rtrain._rtrain",
    "C core of the rtrain notebook client (see the rtrain package).", -1, module_methods};

static PyObject *rt_py__new_exc(PyObject *m, const char *name, PyObject *bases, const char *doc)
{
    char full[96];
    snprintf(full, sizeof full, "rtrain.%s", name);
    PyObject *e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    Py_DECREF(bases);
    if (!e)
        return NULL;
    if (PyModule_AddObjectRef(m, name, e) < 0) {
        Py_DECREF(e);
        return NULL;
    }
    return e; /* the module keeps a reference; so does this static */
}

PyMODINIT_FUNC PyInit__rtrain(void)
{
    import_array();
    if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&ProgramType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&rtrain_module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
        PyModule_AddObjectRef(m, "Program", (PyObject *)&ProgramType) < 0 ||
        PyModule_AddStringConstant(m, "__version__", RT_VERSION_STRING) < 0)
        goto fail;
#ifdef RT_CLIENT_MAX_OUTPUTS
    /* librtrain sends per-output losses and metrics (rt_train_opts.outputs)
     * and Ftrl's settings: rtrain/__init__.py and optimizers.py use them */
    if (PyModule_AddIntConstant(m, "MAX_OUTPUTS", RT_CLIENT_MAX_OUTPUTS) < 0)
        goto fail;
#endif
    if (!(RtError = rt_py__new_exc(m, "Error", Py_BuildValue("(O)", PyExc_Exception),
                                   "Base of every error rtrain raises for the daemon.")))
        goto fail;
#define RT_PY_EXC(var, name, extra, doc)                                              \
    if (!(var = rt_py__new_exc(m, name, Py_BuildValue("(OO)", RtError, extra), doc))) \
        goto fail;
#define RT_PY_EXC1(var, name, doc)                                            \
    if (!(var = rt_py__new_exc(m, name, Py_BuildValue("(O)", RtError), doc))) \
        goto fail;
    RT_PY_EXC(RtConnectionError, "ConnectionError", PyExc_ConnectionError,
              "The daemon cannot be reached (not running, wrong address).");
    RT_PY_EXC(RtInvalidArgument, "InvalidArgument", PyExc_ValueError,
              "The daemon rejected a model, option or data set.");
    RT_PY_EXC(RtNotFound, "NotFound", PyExc_LookupError, "Unknown session, program or data set.");
    RT_PY_EXC(RtDeadlineExceeded, "DeadlineExceeded", PyExc_TimeoutError,
              "The call ran past its timeout.");
    RT_PY_EXC(RtUnimplemented, "Unimplemented", PyExc_NotImplementedError,
              "The daemon does not implement this.");
    RT_PY_EXC1(RtCancelled, "Cancelled", "The call was cancelled.");
    RT_PY_EXC1(RtResourceExhausted, "ResourceExhausted",
               "Over a daemon limit (message size, sessions, memory).");
    RT_PY_EXC1(RtFailedPrecondition, "FailedPrecondition",
               "The call does not fit the daemon's state.");
    RT_PY_EXC1(RtAlreadyExists, "AlreadyExists", "Already exists.");
    RT_PY_EXC1(RtUnauthenticated, "Unauthenticated", "Missing or bad token.");
    RT_PY_EXC1(RtDataLoss, "DataLoss", "Corrupt or truncated data.");
    RT_PY_EXC1(RtInternalError, "InternalError", "The daemon failed internally.");
#undef RT_PY_EXC
#undef RT_PY_EXC1
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
