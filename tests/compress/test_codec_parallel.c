/* test_codec_parallel.c: codec_parallel (compress/codec_parallel.c) driven
 * directly with recording range functions, written against mutants that
 * survived scripts/mutate (docs/testing.md): the codec tests see only its
 * results, which by design do not depend on how it splits the work. Checked
 * against codec_impl.h's contract:
 *
 * 1. The split: t = min(max(threads, 1), units, HFL_CODEC_MAX_THREADS)
 *    ranges (one, [0, 0), when units = 0), range i = [units i / t,
 *    units (i + 1) / t); check then apply on each range exactly once, no
 *    apply before every check has returned; the calling thread takes range 0
 *    and every other range runs on a thread of its own.
 * 2. A failing check: -1 with the err of the lowest failing range, whatever
 *    the thread count, and no apply at all; a failing apply: -1 with its err.
 *    err may be NULL; check or apply may be NULL.
 * 3. Without threads (no room left for a stack): every range on the caller.
 * 4. A stress run (600 rounds of 16 threads over 16 units, whose checks all
 *    end at the same moment) that must end: a lost update of the checked
 *    count would leave it waiting forever. */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compress/codec_impl.h"
#include "tests/check.h"
#include "util/util.h"

#define MAXR 128

typedef struct {
    pthread_mutex_t lock;
    int n_check, n_apply, early_apply;
    size_t check_lo[MAXR], check_hi[MAXR], apply_lo[MAXR], apply_hi[MAXR];
    pthread_t check_thread[MAXR];
    size_t fail_check, fail_apply; /* a unit whose range fails (SIZE_MAX: none) */
    int expect_ranges;
} rec;

static int on_check(void *ctx, size_t lo, size_t hi, char *err) {
    rec *r = ctx;
    pthread_mutex_lock(&r->lock);
    int k = r->n_check++;
    if (k < MAXR) r->check_lo[k] = lo, r->check_hi[k] = hi, r->check_thread[k] = pthread_self();
    pthread_mutex_unlock(&r->lock);
    hfl_sleep_ms(1); /* give the other ranges time to get ahead if they could */
    if (r->fail_check >= lo && r->fail_check < hi) return hfl_errf(err, "check of [%zu, %zu)", lo, hi);
    return 0;
}

static int on_apply(void *ctx, size_t lo, size_t hi, char *err) {
    rec *r = ctx;
    pthread_mutex_lock(&r->lock);
    int k = r->n_apply++;
    if (k < MAXR) r->apply_lo[k] = lo, r->apply_hi[k] = hi;
    if (r->n_check != r->expect_ranges) r->early_apply = 1;
    pthread_mutex_unlock(&r->lock);
    if (r->fail_apply >= lo && r->fail_apply < hi) return hfl_errf(err, "apply of [%zu, %zu)", lo, hi);
    return 0;
}

static int expected_t(size_t units, int threads) {
    size_t t = threads < 1 ? 1 : (size_t)threads;
    if (t > HFL_CODEC_MAX_THREADS) t = HFL_CODEC_MAX_THREADS;
    if (t > units) t = units ? units : 1;
    return (int)t;
}

/* Range [lo, hi) was recorded exactly once in (lo_v, hi_v)[0..n). */
static int once(const size_t *lo_v, const size_t *hi_v, int n, size_t lo, size_t hi) {
    int seen = 0;
    for (int k = 0; k < n && k < MAXR; k++) seen += lo_v[k] == lo && hi_v[k] == hi;
    return seen == 1;
}

static void split(size_t units, int threads) {
    rec r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.lock, NULL);
    r.fail_check = r.fail_apply = SIZE_MAX;
    int t = expected_t(units, threads);
    r.expect_ranges = t;
    char err[HFL_ERR_LEN] = "";
    CHECK(codec_parallel(units, threads, on_check, on_apply, &r, err) == 0);
    CHECK_MSG(r.n_check == t && r.n_apply == t, "units %zu threads %d: %d checks, %d applies, expected %d", units,
              threads, r.n_check, r.n_apply, t);
    CHECK_MSG(!r.early_apply, "units %zu threads %d: an apply ran before every check returned", units, threads);
    int others = 0, caller = 0;
    for (int i = 0; i < t; i++) {
        size_t lo = units * (size_t)i / (size_t)t, hi = units * (size_t)(i + 1) / (size_t)t;
        CHECK_MSG(once(r.check_lo, r.check_hi, r.n_check, lo, hi) && once(r.apply_lo, r.apply_hi, r.n_apply, lo, hi),
                  "units %zu threads %d: range [%zu, %zu) not run exactly once", units, threads, lo, hi);
    }
    for (int k = 0; k < r.n_check && k < MAXR; k++) {
        int mine = pthread_equal(r.check_thread[k], pthread_self());
        if (mine) {
            caller++;
            CHECK_MSG(r.check_lo[k] == 0, "units %zu threads %d: the caller ran a range other than the first", units,
                      threads);
        } else {
            for (int j = 0; j < k; j++)
                CHECK_MSG(!pthread_equal(r.check_thread[j], r.check_thread[k]),
                          "units %zu threads %d: two ranges on one thread", units, threads);
            others++;
        }
    }
    CHECK_MSG(caller == 1 && others == t - 1, "units %zu threads %d: %d ranges on the caller, %d on threads", units,
              threads, caller, others);
    pthread_mutex_destroy(&r.lock);
}

static void failures(void) {
    for (int threads = 1; threads <= 8; threads += 7) {
        rec r;
        memset(&r, 0, sizeof r);
        pthread_mutex_init(&r.lock, NULL);
        r.fail_apply = SIZE_MAX;
        r.fail_check = 50; /* in range [50, 62) of 8 over 100 units */
        r.expect_ranges = expected_t(100, threads);
        char err[HFL_ERR_LEN] = "";
        CHECK(codec_parallel(100, threads, on_check, on_apply, &r, err) == -1 && r.n_apply == 0);
        CHECK_MSG(!strcmp(err, threads == 1 ? "check of [0, 100)" : "check of [50, 62)"), "err '%s'", err);
        /* the first range (the caller's) failing */
        memset(&r.n_check, 0, sizeof r - offsetof(rec, n_check));
        r.fail_apply = SIZE_MAX, r.fail_check = 3, r.expect_ranges = expected_t(100, threads);
        CHECK(codec_parallel(100, threads, on_check, on_apply, &r, err) == -1 && r.n_apply == 0);
        CHECK_MSG(!strcmp(err, threads == 1 ? "check of [0, 100)" : "check of [0, 12)"), "err '%s'", err);
        /* a failing range and err NULL */
        memset(&r.n_check, 0, sizeof r - offsetof(rec, n_check));
        r.fail_apply = SIZE_MAX, r.fail_check = 99, r.expect_ranges = expected_t(100, threads);
        CHECK(codec_parallel(100, threads, on_check, on_apply, &r, NULL) == -1 && r.n_apply == 0); /* err NULL */
        /* a failing apply */
        memset(&r.n_check, 0, sizeof r - offsetof(rec, n_check));
        r.fail_check = SIZE_MAX, r.fail_apply = 12, r.expect_ranges = expected_t(100, threads);
        err[0] = 0;
        CHECK(codec_parallel(100, threads, on_check, on_apply, &r, err) == -1);
        CHECK_MSG(!strcmp(err, threads == 1 ? "apply of [0, 100)" : "apply of [12, 25)"), "err '%s'", err);
        /* NULL check or apply */
        memset(&r.n_check, 0, sizeof r - offsetof(rec, n_check));
        r.fail_check = r.fail_apply = SIZE_MAX, r.expect_ranges = 0;
        CHECK(codec_parallel(100, threads, NULL, on_apply, &r, err) == 0);
        CHECK(r.n_check == 0 && r.n_apply == expected_t(100, threads));
        memset(&r.n_check, 0, sizeof r - offsetof(rec, n_check));
        r.fail_check = r.fail_apply = SIZE_MAX;
        CHECK(codec_parallel(100, threads, on_check, NULL, &r, err) == 0 && r.n_check == expected_t(100, threads) &&
              r.n_apply == 0);
        pthread_mutex_destroy(&r.lock);
    }
}

/* Every range's check waits until all have arrived (or 200 ms passed), so
 * the ranges finish their checks together and update the shared count at
 * the same moment. */
typedef struct {
    int arrived, t, sum;
} gate;

static int gate_check(void *ctx, size_t lo, size_t hi, char *err) {
    (void)err;
    gate *g = ctx;
    __atomic_fetch_add(&g->arrived, 1, __ATOMIC_SEQ_CST);
    double t0 = hfl_now();
    while (__atomic_load_n(&g->arrived, __ATOMIC_SEQ_CST) < g->t && hfl_now() - t0 < 0.05)
        sched_yield();
    __atomic_fetch_add(&g->sum, (int)(hi - lo), __ATOMIC_RELAXED);
    return 0;
}

static void stress(void) {
    for (int round = 0; round < 600; round++) {
        gate g = {0, 16, 0};
        CHECK(codec_parallel(16, 16, gate_check, gate_check, &g, NULL) == 0);
        CHECK(g.sum == 32);
    }
}

/* In a child whose address space cannot take another thread stack: every
 * range runs on the calling thread, each once, applies after checks. Run
 * before the process has made any thread (glibc would reuse a cached stack). */
static void no_threads(void) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(2);
        fclose(f);
        struct rlimit rl = {.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (2u << 20),
                            .rlim_max = RLIM_INFINITY};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        static rec r;
        pthread_mutex_init(&r.lock, NULL);
        r.fail_check = r.fail_apply = SIZE_MAX;
        r.expect_ranges = 8;
        char err[HFL_ERR_LEN];
        if (codec_parallel(100, 8, on_check, on_apply, &r, err) != 0) _exit(4);
        if (r.n_check != 8 || r.n_apply != 8 || r.early_apply) _exit(5);
        for (int i = 0; i < 8; i++)
            if (!once(r.check_lo, r.check_hi, 8, 100u * (size_t)i / 8, 100u * (size_t)(i + 1) / 8) ||
                !once(r.apply_lo, r.apply_hi, 8, 100u * (size_t)i / 8, 100u * (size_t)(i + 1) / 8) ||
                !pthread_equal(r.check_thread[i], pthread_self()))
                _exit(6);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "without threads: child status %d", status);
}

/* Every split of a range of units across a range of thread counts. */
static void splits(void) {
    static const size_t units[] = {0, 1, 2, 5, 7, 64, 100, 1000};
    static const int threads[] = {-3, 0, 1, 2, 3, 8, 63, 64, 65, 1000};
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) split(units[u], threads[t]);
}

static const check_case cases[] = {
    {"no_threads", no_threads},
    {"split", splits},
    {"failures", failures},
    {"stress", stress},
};

int main(int argc, char **argv) {
    return check_run("test_codec_parallel", cases, CHECK_CASES(cases), argc, argv);
}
