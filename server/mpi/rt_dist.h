/* rt_dist: one logical daemon over MPI ranks (`mpirun -n N rtraind ...`).
 *
 * Rank 0 serves gRPC; ranks 1..N-1 run rt_dist_worker() and execute what
 * rank 0 broadcasts: a program's compile (the graph and the compiled
 * config), a data set (once, verified by its content hash on every rank;
 * a streamed one stays on rank 0, which scatters each step's rows; with
 * --shard-data one is spread over the ranks at upload, rt_dist_hold),
 * its state when rank 0's differs (weights set, a checkpoint loaded) and
 * training calls. In a training step each replica computes the gradient
 * of its share of the global batch; rt_replica's reduce sums them with
 * MPI_Allreduce over flat buckets (or, with --deterministic-reduce M, M
 * micro-shard gradients gathered and summed in shard order), and every
 * rank applies the same update. Without micro-shards the buckets can be
 * reduced while the backward pass runs (--overlap-reduce): each one,
 * once final, goes to a communication thread of its rank, which reduces
 * them in the order the backward pass finishes them, the same on every
 * rank; docs/design.md says when that pays. Evaluate, Predict and GetWeights read
 * rank 0's replica: the weights are the same on every rank.
 *
 * Threads: rank 0 calls these from any thread; one mutex orders the
 * collectives (MPI_THREAD_SERIALIZED). Collectives are blocking MPI calls
 * watched by a thread: one in flight for --dist-timeout-ms (a replica died
 * or hangs) is left from MPI's progress loop (rt_dist.c, the guard) and
 * fails the call with RT_EUNAVAILABLE,
 * and every later distributed call too. A replica whose process ends is
 * noticed at once by its TCP link to rank 0 (rt_dist.c, the links); a
 * broken job then stops rank 0 (SIGTERM to itself: rtraind's stop
 * checkpoints, then rt_dist_finalize ends the job).
 *
 *     rt_dist_opts o = {.micro = 0, .timeout_ms = 30000};
 *     rt_dist_init(&o, err, sizeof err);          // every rank, after argv
 *     if (rt_dist_rank() > 0) return rt_dist_worker();
 *     ...                                         // rank 0: serve
 *     rt_dist_program(e, packed_compile_req, len, err, sizeof err);
 *     rt_dist_train(e, &data, ds->key, steps, &res, cb, ud, NULL, err, sizeof err);
 *     ...
 *     rt_dist_finalize();                         // ends the workers */
#ifndef RTRAIN_DIST_H
#define RTRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "rt_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --overlap-reduce: auto times the first steps of each program both ways
 * and keeps the faster (rank 0 decides, every rank follows) */
enum { RT_DIST_OVERLAP_AUTO = 0, RT_DIST_OVERLAP_ON, RT_DIST_OVERLAP_OFF };
/* --shard-optimizer (ZeRO stage 1): auto shards above the size the cost
 * model in rt_dist.c gives */
enum { RT_DIST_SHARD_AUTO = 0, RT_DIST_SHARD_ON, RT_DIST_SHARD_OFF };

typedef struct rt_dist_opts {
    int micro;             /* --deterministic-reduce M, 0 = off */
    int timeout_ms;        /* --dist-timeout-ms, a replica's answer */
    int64_t bucket_floats; /* --reduce-bucket-floats, the all-reduce bucket */
    int overlap;           /* --overlap-reduce, RT_DIST_OVERLAP_* */
    int shard;             /* --shard-optimizer, RT_DIST_SHARD_* */
    int data;              /* --shard-data, RT_DIST_SHARD_* */
    uint64_t stop_ms;      /* rank 0: how long a broken job's stop may take
                            * (the daemon's --grace-ms plus a margin) */
} rt_dist_opts;

/* Starts MPI when the process was launched by mpirun/srun (OMPI_/PMI_/PMIX_
 * environment), else stays a single process. Returns 0 or a negative code
 * with err. */
int rt_dist_init(const rt_dist_opts *o, char *err, size_t errlen);
int rt_dist_rank(void);
int rt_dist_size(void);
int rt_dist_micro(void); /* --deterministic-reduce, 0 = off */
/* Replica i's host name (i < rt_dist_size()). */
const char *rt_dist_host(int i);
/* Ranks > 0: serve rank 0's commands until it ends the job. Returns the
 * process exit status. */
int rt_dist_worker(void);
/* Rank 0 at exit: tells the workers to finish, MPI_Finalize. */
void rt_dist_finalize(void);

/* Rank 0, after a program's exec is created: compile the same program on
 * every replica and make e a replica. compile_req/len: the packed
 * CompileRequest (its graph or Keras JSON); cfg: the compiled config.
 * No-op in a single process without --deterministic-reduce. */
int rt_dist_program(rt_exec *e, const uint8_t *compile_req, size_t len, char *err, size_t errlen);
/* rt_exec_train on every replica. key: the data set's content key (rank 0
 * sends the data once per key and conversion). A streamed set, a large
 * one and an augmented one (d->aug) stay on rank 0, which fills each
 * batch (augmented by its backend's gather) and scatters the rows. */
int rt_dist_train(rt_exec *e, const rt_data *d, const uint8_t key[16], int64_t steps,
                  rt_train_result *res, rt_step_cb cb, void *ud, float *step_losses, char *err,
                  size_t errlen);

/* The data layer's holder (rt_data_set_holder, rt_data.h): with
 * --shard-data on (or auto above its size) and N > 1, rank 0 spreads an
 * uploaded in-memory set's n rows of per floats over the replicas, each
 * keeping 1/N, and returns the handle; else *out NULL. */
struct rt_held;
int rt_dist_hold(const float *x, int64_t n, int64_t per, int64_t bytes, struct rt_held **out,
                 char *err, size_t errlen);

/* The bucketed all-reduce of rt_replica's reduce (sum, in place), exposed
 * for bench/mpi. Returns 0 or RT_EUNAVAILABLE with err. */
int rt_dist_allreduce(float *buf, int64_t n, char *err, size_t errlen);
/* Whether e's steps overlap the reduce: 1 on, 0 off, -1 while auto is
 * still timing both (bench/mpi). */
int rt_dist_overlap_mode(const rt_exec *e);
/* Rank 0: --overlap-reduce from the next training call on, on every rank
 * (RT_DIST_OVERLAP_*; bench/mpi compares them in one run). A rank started
 * with off has no communication thread and stays off. */
void rt_dist_set_overlap(int mode);

#ifdef __cplusplus
}
#endif
#endif
