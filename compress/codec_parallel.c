/* codec_parallel.c: runs a codec's per-range work on several threads.
 *
 * Ranges are contiguous and fixed by (units, threads) alone, and each range's
 * work depends only on its own units, so results do not depend on the thread
 * count. For a decode the check phase (validation) of every range finishes
 * before any range's apply phase (accumulation) starts, and apply runs only if
 * every check passed: a bad block anywhere leaves acc untouched. The phases are
 * separated by a mutex and condition variable rather than a pthread_barrier so
 * that a thread that could not be created costs only speed: its range runs on
 * the calling thread. */
#include "compress/codec_impl.h"

#include <pthread.h>

#include "util/util.h"

typedef struct parallel_run parallel_run;

typedef struct {
    parallel_run *run;
    size_t lo, hi;
    int rc;
    char err[HFL_ERR_LEN];
} parallel_range;

struct parallel_run {
    codec_range_fn check, apply;
    void *ctx;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int checked; /* ranges whose check has finished */
    int go;      /* 1: apply, -1: a check failed, 0: not decided yet */
};

static void range_check(parallel_range *r) {
    parallel_run *run = r->run;
    r->rc = run->check ? run->check(run->ctx, r->lo, r->hi, r->err) : 0;
    pthread_mutex_lock(&run->lock);
    run->checked++;
    pthread_cond_broadcast(&run->cond);
    pthread_mutex_unlock(&run->lock);
}

static void range_apply(parallel_range *r) {
    parallel_run *run = r->run;
    pthread_mutex_lock(&run->lock);
    while (run->go == 0)
        pthread_cond_wait(&run->cond, &run->lock);
    int go = run->go;
    pthread_mutex_unlock(&run->lock);
    if (go > 0 && run->apply)
        r->rc = run->apply(run->ctx, r->lo, r->hi, r->err);
}

static void *range_thread(void *arg) {
    range_check(arg);
    range_apply(arg);
    return NULL;
}

int codec_parallel(size_t units, int threads, codec_range_fn check, codec_range_fn apply,
                   void *ctx, char *err) {
    size_t t = threads < 1 ? 1 : (size_t)threads;
    t = t > HFL_CODEC_MAX_THREADS ? HFL_CODEC_MAX_THREADS : t;
    t = t > units ? (units ? units : 1) : t;
    if (t == 1) {
        if (check && check(ctx, 0, units, err))
            return -1;
        return apply ? apply(ctx, 0, units, err) : 0;
    }
    parallel_run run = {.check = check, .apply = apply, .ctx = ctx};
    pthread_mutex_init(&run.lock, NULL);
    pthread_cond_init(&run.cond, NULL);
    parallel_range ranges[HFL_CODEC_MAX_THREADS];
    pthread_t tid[HFL_CODEC_MAX_THREADS];
    int started[HFL_CODEC_MAX_THREADS] = {0};
    for (size_t i = 0; i < t; i++)
        ranges[i] = (parallel_range){.run = &run, .lo = units * i / t, .hi = units * (i + 1) / t};
    for (size_t i = 1; i < t; i++)
        started[i] = pthread_create(&tid[i], NULL, range_thread, &ranges[i]) == 0;
    for (size_t i = 0; i < t; i++)
        if (i == 0 || !started[i])
            range_check(&ranges[i]);
    pthread_mutex_lock(&run.lock);
    while (run.checked < (int)t)
        pthread_cond_wait(&run.cond, &run.lock);
    run.go = 1;
    for (size_t i = 0; i < t; i++)
        if (ranges[i].rc)
            run.go = -1;
    pthread_cond_broadcast(&run.cond);
    pthread_mutex_unlock(&run.lock);
    for (size_t i = 0; i < t; i++)
        if (i == 0 || !started[i])
            range_apply(&ranges[i]);
    for (size_t i = 1; i < t; i++)
        if (started[i])
            pthread_join(tid[i], NULL);
    pthread_cond_destroy(&run.cond);
    pthread_mutex_destroy(&run.lock);
    for (size_t i = 0; i < t; i++)
        if (ranges[i].rc) {
            if (err)
                memcpy(err, ranges[i].err, HFL_ERR_LEN);
            return -1;
        }
    return 0;
}
