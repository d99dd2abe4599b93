/* test_withhold.c: a client that takes its task and never answers cannot
 * stall the rounds (coordinator/overdue.c).
 *
 * Run A: a coordinator with its defaults but for a short deadline (3 s; 6
 * rounds, K = 2), three honest hfl-client processes, and client-3, played
 * by this test, which says hello with a plan, pulls every 0.2 s so it looks
 * alive, and never sends an update or a decline for the tasks it gets. Run
 * B: the same without client-3. Run A must fail at most one round of 6
 * (before over-selection, the quorum fraction and overdue.c, with K = 2 drawn of 4 and the quorum at K, every round
 * that drew client-3 waited out its deadline and failed: 2 of the 6 with
 * this seed), end within 1 point of run B's final accuracy, and show
 * client-3 with tasks past their deadline in its report and on /metrics
 * (scraped while the coordinator lingers, --metrics). The test stops at the
 * first process that exits with an error.
 *
 * In run A client-3 says hello first, client-0 starts once it is welcomed,
 * and clients 1 and 2 once round 1 has opened (the event log says so): round
 * 1 then draws client-3 and client-0 alone and waits out its deadline for
 * client-3, so client-3's task is past due before the run ends. Started all
 * at once, three honest clients were sometimes planned before round 1
 * opened; it then drew three, closed on the two honest updates in 0.3 s,
 * and the six rounds ended 2.3 s after client-3's first task, before its
 * 3 s deadline: no task was ever judged overdue (a clean-clone run). */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/msg.h"
#include "proto/pki.h"
#include "proto/transport.h"
#include "tests/integration/harness.h"
#include "tests/integration/prove.h"
#include "util/util.h"

#define MAX_PAYLOAD ((size_t)199210 * 4 + 4096)
#define N_HONEST 3

static const char *coord_exe, *client_exe;
static char pki[300], ca[320], cpem[320];

/* client-3: tasks taken, none answered. */
typedef struct {
    char url[300];
    volatile int stop;
    int tasks, pulls, said_hello;
    int hello_over; /* set (atomically) once said_hello and why say how the hello went */
    char why[256];
} withholder;

static void *withhold(void *arg) {
    withholder *w = arg;
    char pem[320], err[HFL_ERR_LEN], token[64];
    int id = -1;
    nng_socket sock;
    snprintf(pem, sizeof pem, "%s/client-3.pem", pki);
    hfl_tls_opts tls = {0, ca, pem, "localhost"};
    if (hfl_transport_dial(&sock, w->url, &tls, MAX_PAYLOAD + 65536, 10000, err) != 0) {
        snprintf(w->why, sizeof w->why, "dial: %.200s", err);
        __atomic_store_n(&w->hello_over, 1, __ATOMIC_RELEASE);
        return NULL;
    }
    cJSON *hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "samples", 7500);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(hello, "plan"), "batch", 32);
    if (prove_hello(sock, pem, ca, hello, MAX_PAYLOAD, &id, token, w->why) != HFL_MSG_WELCOME) {
        nng_close(sock);
        __atomic_store_n(&w->hello_over, 1, __ATOMIC_RELEASE);
        return NULL;
    }
    w->said_hello = 1;
    __atomic_store_n(&w->hello_over, 1, __ATOMIC_RELEASE);
    while (!w->stop) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddNumberToObject(m, "client_id", id);
        cJSON_AddStringToObject(m, "token", token);
        hfl_msg rep;
        nng_msg *raw;
        int rc = hfl_transport_request(sock, HFL_MSG_PULL, m, NULL, 0, MAX_PAYLOAD, &rep, &raw, err);
        cJSON_Delete(m);
        if (rc != 0) break; /* the coordinator is gone: the run is over */
        w->pulls++;
        int t = rep.type;
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rep.meta, "weights"));
        w->tasks += t == HFL_MSG_TASK && kind && strcmp(kind, "sent") != 0; /* not the short repeats */
        hfl_msg_free(&rep);
        nng_msg_free(raw);
        if (t == HFL_MSG_BYE) break;
        hfl_sleep_ms(200);
    }
    nng_close(sock);
    return NULL;
}

static char metrics[65536]; /* run A's /metrics, scraped after its last round */

/* GET /metrics from the coordinator whose log names its port ("metrics on
 * http://127.0.0.1:PORT"), into metrics; 0 or -1. */
static int scrape(void) {
    char log[400], err[HFL_ERR_LEN];
    snprintf(log, sizeof log, "%s/coordinator.log", harness_tmpdir());
    char *text = hfl_read_file(log, NULL, err);
    const char *at = text ? strstr(text, "metrics on http://127.0.0.1:") : NULL;
    int port = at ? atoi(at + strlen("metrics on http://127.0.0.1:")) : 0;
    free(text);
    int fd = port > 0 ? socket(AF_INET, SOCK_STREAM, 0) : -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    const char *req = "GET /metrics HTTP/1.0\r\n\r\n";
    size_t n = 0;
    ssize_t got = write(fd, req, strlen(req));
    while (got > 0 && n < sizeof metrics - 1 && (got = read(fd, metrics + n, sizeof metrics - 1 - n)) > 0) n += (size_t)got;
    metrics[n] = 0;
    close(fd);
    return n > 0 ? 0 : -1;
}

static int rounds_in(const char *report) {
    char err[HFL_ERR_LEN];
    char *text = hfl_read_file(report, NULL, err);
    cJSON *r = text ? cJSON_Parse(text) : NULL;
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "rounds"));
    cJSON_Delete(r);
    free(text);
    return n;
}

/* 1 when the event log at path says a round opened. */
static int round_opened(const char *path) {
    char *text = hfl_read_file(path, NULL, NULL);
    int open = text && strstr(text, "\"event\":\"round_open\"") != NULL;
    free(text);
    return open;
}

/* Runs one fleet to its end, failing at the first process that fails;
 * returns the report. */
static cJSON *run(const char *name, int with_withholder) {
    const char *dir = harness_tmpdir();
    char report[400], events[400], url[300], err[HFL_ERR_LEN];
    snprintf(report, sizeof report, "%s/%s-report.json", dir, name);
    snprintf(events, sizeof events, "%s/%s-events.jsonl", dir, name);
    char *extra[] = {"--listen", "tls+tcp://127.0.0.1:0", "--ca", ca, "--cert", cpem, "--rounds", "6",
                     "--deadline", "3", "--linger", "2", "--report", report, "--log", events,
                     with_withholder ? "--metrics" : NULL, "127.0.0.1:0", NULL};
    pid_t coord = harness_start_coordinator(coord_exe, extra, url, sizeof url);
    REQUIRE_MSG(coord > 0, "%s: coordinator did not start", name);
    pid_t clients[N_HONEST];
    withholder w = {0};
    pthread_t th;
    snprintf(w.url, sizeof w.url, "%s", url);
    if (with_withholder) {
        pthread_create(&th, NULL, withhold, &w);
        for (double t = hfl_now(); !__atomic_load_n(&w.hello_over, __ATOMIC_ACQUIRE); hfl_sleep_ms(20))
            REQUIRE_MSG(hfl_now() - t < 60, "%s: client-3 was not welcomed in 60 s", name);
        REQUIRE_MSG(w.said_hello, "%s: client-3's hello: %s", name, w.why);
    }
    for (int i = 0; i < N_HONEST; i++) {
        if (with_withholder && i == 1) /* round 1 draws client-3 and client-0 (the header) */
            for (double t = hfl_now(); !round_opened(events); hfl_sleep_ms(20))
                REQUIRE_MSG(hfl_now() - t < 60, "%s: round 1 did not open in 60 s", name);
        char pem[320], log[400], idx[8];
        snprintf(pem, sizeof pem, "%s/client-%d.pem", pki, i);
        snprintf(log, sizeof log, "%s/%s-client-%d.log", dir, name, i);
        snprintf(idx, sizeof idx, "%d", i);
        char *argv[] = {(char *)client_exe, "--coordinator", url, "--ca", ca, "--cert", pem, "--client-index", idx,
                        "--num-clients", "4", NULL};
        clients[i] = harness_spawn(argv, log);
    }
    double t0 = hfl_now();
    int coord_rc = -2;
    while (coord_rc == -2) {
        REQUIRE_MSG(hfl_now() - t0 < 180, "%s: the run did not end in 180 s", name);
        coord_rc = harness_poll(coord);
        REQUIRE_MSG(coord_rc == -2 || coord_rc == 0, "%s: the coordinator exited with %d", name, coord_rc);
        if (with_withholder && coord_rc == -2 && !metrics[0] && rounds_in(report) == 6)
            REQUIRE_MSG(scrape() == 0, "%s: no /metrics", name); /* it lingers with --metrics */
        for (int i = 0; i < N_HONEST; i++) {
            if (!clients[i]) continue;
            int st = harness_poll(clients[i]);
            REQUIRE_MSG(st == -2 || st == 0, "%s: client-%d exited with %d", name, i, st);
            if (st == 0) clients[i] = 0;
        }
        hfl_sleep_ms(50);
    }
    for (int i = 0; i < N_HONEST; i++)
        if (clients[i]) REQUIRE_MSG(harness_wait(clients[i], 30) == 0, "%s: client-%d failed", name, i);
    if (with_withholder) {
        w.stop = 1;
        pthread_join(th, NULL);
        REQUIRE_MSG(w.said_hello, "%s: client-3's hello: %s", name, w.why);
        printf("%s: client-3 pulled %d times, took %d tasks, answered none\n", name, w.pulls, w.tasks);
    }
    printf("%s: %.1f s\n", name, hfl_now() - t0);
    size_t len;
    char *text = hfl_read_file(report, &len, err);
    REQUIRE_MSG(text, "%s", err);
    cJSON *r = cJSON_Parse(text);
    free(text);
    REQUIRE_MSG(cJSON_IsObject(r), "%s: report does not parse", name);
    return r;
}

static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)); }

/* Rounds that failed; prints each round's line. */
static int failed_rounds(const char *name, const cJSON *r) {
    int failed = 0;
    const cJSON *round;
    cJSON_ArrayForEach(round, cJSON_GetObjectItemCaseSensitive(r, "rounds")) {
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(round, "status"));
        failed += !st || strcmp(st, "ok") != 0;
        printf("%s: round %g %s, %g of %g drawn, %g benched, test_acc %.4f, %.2f s\n", name, num(round, "round"),
               st ? st : "?", num(round, "clients"), num(round, "selected"), num(round, "benched"), num(round, "test_acc"),
               num(round, "wall_s"));
    }
    return failed;
}

int main(int argc, char **argv) {
    const char *dir = harness_begin(argc, "test_withhold");
    check_on_stop(harness_stop); /* this file's REQUIREs too (check.h's hook is per file) */
    coord_exe = argv[1], client_exe = argv[2];
    char err[HFL_ERR_LEN];
    snprintf(pki, sizeof pki, "%s/pki", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", pki);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", pki);
    REQUIRE_MSG(hfl_pki_create(pki, 4, "localhost", 1, err) == 0, "%s", err);

    cJSON *a = run("withheld", 1);
    cJSON *b = run("honest", 0);
    int failed = failed_rounds("withheld", a);
    failed_rounds("honest", b);
    CHECK_MSG(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(a, "rounds")) == 6 && failed <= 1,
              "%d of the withheld run's rounds failed", failed);
    double acc_a = num(a, "final_test_acc"), acc_b = num(b, "final_test_acc");
    printf("final accuracy: %.4f with client-3 withholding, %.4f without it\n", acc_a, acc_b);
    CHECK_MSG(acc_a > acc_b - 0.01 && acc_a < acc_b + 0.01, "final accuracy %.4f vs %.4f: more than 1 point apart",
              acc_a, acc_b);
    /* the report names the withholder: its tasks went overdue, no honest client's did */
    const cJSON *cl;
    double overdue = 0;
    cJSON_ArrayForEach(cl, cJSON_GetObjectItemCaseSensitive(a, "clients")) {
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cl, "name"));
        printf("withheld: %s: %g updates, %g tasks overdue\n", n ? n : "?", num(cl, "updates"), num(cl, "tasks_overdue"));
        if (n && !strcmp(n, "client-3")) overdue = num(cl, "tasks_overdue");
    }
    CHECK_MSG(overdue >= 1, "the report shows %g overdue tasks for client-3", overdue);
    const char *line = strstr(metrics, "hfl_client_tasks_overdue{client=\"client-3\"} ");
    printf("metrics: %.*s\n", line ? (int)strcspn(line, "\n") : 4, line ? line : "none");
    CHECK_MSG(line && atoi(line + strlen("hfl_client_tasks_overdue{client=\"client-3\"} ")) == (int)overdue &&
                  !strstr(metrics, "hfl_client_tasks_overdue{client=\"client-0\"}"),
              "/metrics does not show client-3's overdue tasks");
    cJSON_Delete(a);
    cJSON_Delete(b);
    harness_cleanup();
    return check_exit_code("test_withhold");
}
