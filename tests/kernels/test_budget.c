/* test_budget.c: the CPU backend's memory accounting and budget: live bytes
 * and their high-water mark through alloc/free sequences (and a reset),
 * allocations within, exactly at and over the budget (try_alloc's NULL and
 * message; alloc's exit(1) and one-line message, in a forked child), a budget
 * set below the live bytes, threads racing for the last bytes (exactly the
 * budget is granted), and a double free caught (abort, in a child). */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/budget.h"
#include "tests/check.h"
#include "util/util.h"

static const hfl_backend *be;

static void test_high_water(void) {
    hfl_budget_set(0);
    uint64_t base = hfl_budget_live_bytes();
    CHECK(base == 0);
    hfl_budget_reset_peak();
    CHECK(hfl_budget_peak_bytes() == base);

    void *a = be->alloc(100), *b = be->alloc(200);
    CHECK(hfl_budget_live_bytes() == 300 && hfl_budget_peak_bytes() == 300);
    be->free(a);
    CHECK(hfl_budget_live_bytes() == 200 && hfl_budget_peak_bytes() == 300);
    void *c = be->alloc(50);
    CHECK(hfl_budget_live_bytes() == 250 && hfl_budget_peak_bytes() == 300);
    void *d = be->alloc(1000); /* above the old mark: the mark follows */
    CHECK(hfl_budget_live_bytes() == 1250 && hfl_budget_peak_bytes() == 1250);
    be->free(d);
    hfl_budget_reset_peak();
    CHECK(hfl_budget_peak_bytes() == 250);
    void *e = be->alloc(10);
    CHECK(hfl_budget_peak_bytes() == 260);
    void *z = be->alloc(0); /* a zero-byte block counts nothing but is a real block */
    CHECK(z != NULL && (uintptr_t)z % 64 == 0 && hfl_budget_live_bytes() == 260);
    be->free(z);
    be->free(NULL);
    be->free(b);
    be->free(c);
    be->free(e);
    CHECK(hfl_budget_live_bytes() == 0 && hfl_budget_peak_bytes() == 260);
}

static void test_budget_limits(void) {
    char err[HFL_ERR_LEN] = "";
    hfl_budget_set(4096);
    void *a = be->try_alloc(3000, err);
    CHECK(a != NULL);
    void *b = be->try_alloc(1097, err); /* 4097 > 4096 */
    CHECK(b == NULL);
    CHECK(strstr(err, "allocating 1097 bytes would exceed the memory budget") != NULL);
    CHECK(strstr(err, "3000 bytes live") != NULL && strstr(err, "budget 4096 bytes") != NULL);
    CHECK(strchr(err, '\n') == NULL);
    CHECK(hfl_budget_live_bytes() == 3000); /* a refusal takes nothing */
    b = be->try_alloc(1096, err);                /* exactly the budget fits */
    CHECK(b != NULL && hfl_budget_live_bytes() == 4096);
    CHECK(be->try_alloc(1, err) == NULL);
    CHECK(be->try_alloc(SIZE_MAX, err) == NULL); /* no wrap-around in the check */
    be->free(b);

    /* A budget below what is live: nothing more until enough is freed. */
    hfl_budget_set(1000);
    CHECK(be->try_alloc(1, err) == NULL);
    CHECK(strstr(err, "3000 bytes live, budget 1000 bytes") != NULL);
    be->free(a);
    a = be->try_alloc(1000, err);
    CHECK(a != NULL);
    be->free(a);

    /* No budget: even a request over the old one succeeds. */
    hfl_budget_set(0);
    a = be->try_alloc(1 << 20, err);
    CHECK(a != NULL);
    be->free(a);
    /* The system's refusal is reported the same way, and takes nothing. */
    err[0] = 0;
    CHECK(be->try_alloc(SIZE_MAX / 4, err) == NULL); /* passes the guard, aligned_alloc fails */
    CHECK(strstr(err, "out of memory allocating") != NULL);
    err[0] = 0;
    CHECK(be->try_alloc(SIZE_MAX - 8, err) == NULL); /* the guard */
    CHECK(strstr(err, "out of memory allocating") != NULL);
    CHECK(hfl_budget_live_bytes() == 0);
    CHECK(hfl_budget_peak_bytes() < (1u << 21)); /* failures never raise the mark */
}

/* Runs fn in a child with stderr captured; returns the wait status and the text. */
static int run_child(void (*fn)(void), char *text, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < cap && (r = read(fd[0], text + len, cap - 1 - len)) > 0) len += (size_t)r;
    text[len] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void child_over_budget(void) {
    hfl_budget_set(1 << 20);
    void *a = be->alloc(700000);
    (void)a;
    be->alloc(400000); /* 1,100,000 > 1,048,576: must exit(1) */
}

static void child_double_free(void) {
    void *a = be->alloc(64);
    be->free(a);
    be->free(a);
}

static void test_alloc_exits(void) {
    char text[1024];
    int st = run_child(child_over_budget, text, sizeof text);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK(strcmp(text, "hfl: cpu backend: allocating 400000 bytes would exceed the memory "
                       "budget: 700000 bytes live, budget 1048576 bytes\n") == 0);
    if (strchr(text, '\n') != strrchr(text, '\n')) CHECK(!"message is one line");
    st = run_child(child_double_free, text, sizeof text);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    CHECK(strstr(text, "not a live backend block") != NULL);
}

/* Threads race for a budget of exactly BLOCKS blocks, each trying more; a
 * racy check-then-add would grant more than the budget. */
#define THREADS 4
#define BLOCKS 2000
#define BLOCK 1024
static void *blocks[THREADS][BLOCKS];

static void *race(void *arg) {
    void **mine = arg;
    for (int i = 0; i < BLOCKS; i++) mine[i] = be->try_alloc(BLOCK, NULL);
    return NULL;
}

static void test_threads(void) {
    hfl_budget_set((uint64_t)BLOCKS * BLOCK);
    hfl_budget_reset_peak();
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) CHECK(pthread_create(&th[t], NULL, race, blocks[t]) == 0);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    int granted = 0;
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < BLOCKS; i++) granted += blocks[t][i] != NULL;
    CHECK(granted == BLOCKS);
    CHECK(hfl_budget_live_bytes() == (uint64_t)BLOCKS * BLOCK);
    CHECK(hfl_budget_peak_bytes() == (uint64_t)BLOCKS * BLOCK);
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < BLOCKS; i++) be->free(blocks[t][i]);
    CHECK(hfl_budget_live_bytes() == 0);
    hfl_budget_set(0);
}

static const check_case cases[] = {
    {"high_water", test_high_water},
    {"budget_limits", test_budget_limits},
    {"alloc_exits", test_alloc_exits},
    {"threads", test_threads},
};

int main(int argc, char **argv) {
    be = hfl_backend_cpu();
    return check_run("test_budget", cases, CHECK_CASES(cases), argc, argv);
}
