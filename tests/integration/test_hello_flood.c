/* test_hello_flood.c: an insider flooding first hellos that carry a
 * victim's certificate cannot keep the victim out (coordinator/challenges.h, rate.h).
 *
 * The insider holds a valid client certificate of its own (client-2, for its
 * TLS connections) and the victim's certificate, which is public. From 20
 * connections it sends first hellos {cert: the victim's, nonce} at 200 a
 * second in all, each of which, answered, is a challenge pending for the
 * victim's name (--hello-rate lets about half through: 5 a second per
 * connection). Meanwhile the victim (client-0, an hfl-client process)
 * starts, proves its identity again as its token expires (--token-ttl 3),
 * and rejoins a coordinator killed with SIGKILL once round 2 has closed and
 * the victim has re-authenticated, then started again from its --state-dir;
 * client-1 is the other client of each round (K = 2, ROUNDS rounds), paced as a
 * 20 Mbit/s device (--pace 1 --link 20:20:0) so that a round lasts about a
 * second on any host and tokens expire within the run. The victim must finish every round
 * it is drawn into, and not one of its hellos may find its challenge gone
 * ("carries no challenge of ours") in either coordinator's log or its own:
 * the old table, one challenge per name, lost it to the next first hello.
 * The test stops at the first process that exits with an error.
 *
 * Why 3 s and not less: each flood connection always has a request waiting,
 * so every request of the victim's queues behind about 20 of the flood's.
 * In the sanitizer build a first hello costs the coordinator about 5 ms of
 * CPU (it ran at 85-95% of a core under this flood), and on two cores shared
 * with a second test that wait passed 1 s: with --token-ttl 1, a victim's
 * welcome lapsed before its update was read, it said hello again, and the
 * same happened to the resent update, round after round (26 lapses of a 1 s
 * token in one run with two copies of this test on the two cores; rounds of
 * 6-15 s; the likeliest cause of a CI run that did not end within 240 s).
 * That is a token shorter than the coordinator's queue, not the theft this
 * file is about. 3 s still lapses twice or more in the run. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/hello.h"
#include "proto/pki.h"
#include "proto/transport.h"
#include "tests/integration/harness.h"
#include "util/util.h"

/* 16 rounds, not 8: the coordinator is killed once round 2 has closed AND
 * the victim's 3 s token has lapsed, and in the plain build rounds are short
 * (0.7 s): one run lapsed only after round 7, which left the victim one round
 * to rejoin the restarted coordinator, and it did not (CI-like run beside
 * other work). Now about half the run is left. */
#define ROUNDS 16
#define ROUNDS_ARG "16"
#define FLOOD_CONNS 20
#define FLOOD_PER_CONN_HZ 10 /* 200 first hellos a second in all */

static char pki[300], ca[320], cpem[320], state[320], report[320];
static const char *coord_exe;

typedef struct {
    char url[300];
    const char *victim_cert; /* base64 DER */
    volatile int *stop;
    long sent, challenged, limited, other, failed;
} flooder;

static void *flood(void *arg) {
    flooder *f = arg;
    char pem[320], err[HFL_ERR_LEN], nonce[HFL_ID_NONCE_HEX + 1];
    snprintf(pem, sizeof pem, "%s/client-2.pem", pki);
    hfl_tls_opts tls = {0, ca, pem, "localhost"};
    nng_socket sock;
    /* 20 s, not 2: under load a 2 s dial timed out mid-handshake, and the
     * aborted dial left NNG 1.5's TLS state (its dialer, the TLS config's
     * reference, the peer's parsed certificate) unreachable, which the
     * sanitizer build's LeakSanitizer reported at exit: in 7 of 22 runs two
     * at a time, all while builds loaded the cores too; none in 8 such runs
     * with 20 s (a silent peer's aborted handshake, tried alone, leaks
     * nothing: the leak needs a handshake cut after the server's
     * certificate arrived) */
    while (hfl_transport_dial(&sock, f->url, &tls, 1 << 20, 20000, err) != 0) { /* the coordinator is busy */
        f->failed++;
        if (*f->stop) return NULL;
        hfl_sleep_ms(100);
    }
    double next = hfl_now();
    while (!*f->stop) {
        hfl_random_hex(nonce, err);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "cert", f->victim_cert);
        cJSON_AddStringToObject(m, "nonce", nonce);
        hfl_msg rep;
        nng_msg *raw;
        int rc = hfl_transport_request(sock, HFL_MSG_HELLO, m, NULL, 0, 1 << 20, &rep, &raw, err);
        cJSON_Delete(m);
        __atomic_fetch_add(&f->sent, 1, __ATOMIC_RELAXED);
        if (rc != 0) { /* the coordinator is down (restarting): NNG dials again by itself */
            f->failed++;
        } else {
            f->challenged += rep.type == HFL_MSG_CHALLENGE;
            int limited = rep.type == HFL_MSG_ERROR && cJSON_GetObjectItemCaseSensitive(rep.meta, "retry_ms");
            f->limited += limited;
            f->other += rep.type != HFL_MSG_CHALLENGE && !limited;
            hfl_msg_free(&rep);
            nng_msg_free(raw);
        }
        next += 1.0 / FLOOD_PER_CONN_HZ;
        double wait = next - hfl_now();
        if (wait > 0) hfl_sleep_ms((int)(wait * 1000));
        else if (wait < -1) next = hfl_now(); /* a stall (the restart): no catching up in a burst */
    }
    nng_close(sock);
    return NULL;
}

static pid_t start_coord(const char *listen, char *url) {
    char *extra[] = {"--listen", (char *)listen, "--ca", ca, "--cert", cpem, "--rounds", ROUNDS_ARG,
                     "--clients-per-round", "2",
                     "--deadline", "30", "--token-ttl", "3", "--state-dir", state, "--report", report, "--linger", "3",
                     NULL};
    return harness_start_coordinator(coord_exe, extra, url, 300);
}

static int rounds_done(void) {
    char err[HFL_ERR_LEN];
    char *text = hfl_read_file(report, NULL, err);
    cJSON *r = text ? cJSON_Parse(text) : NULL;
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "rounds"));
    cJSON_Delete(r);
    free(text);
    return n;
}

static int file_has(const char *path, const char *what) {
    char err[HFL_ERR_LEN];
    char *text = hfl_read_file(path, NULL, err);
    int has = text && strstr(text, what);
    free(text);
    return has;
}

/* Fails the test when a client process exited with an error; 0 marks one done. */
static void check_clients(pid_t *clients) {
    for (int i = 0; i < 2; i++) {
        if (!clients[i]) continue;
        int st = harness_poll(clients[i]);
        REQUIRE_MSG(st == -2 || st == 0, "client-%d exited with %d", i, st);
        if (st == 0) clients[i] = 0;
    }
}

int main(int argc, char **argv) {
    const char *dir = harness_begin(argc, "test_hello_flood");
    check_on_stop(harness_stop); /* this file's REQUIREs too (check.h's hook is per file) */
    coord_exe = argv[1];
    char err[HFL_ERR_LEN], url[300], again[300], log[400], first_log[400], vlog[400];
    snprintf(pki, sizeof pki, "%s/pki", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", pki);
    snprintf(cpem, sizeof cpem, "%s/coordinator.pem", pki);
    snprintf(state, sizeof state, "%s/state", dir);
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(log, sizeof log, "%s/coordinator.log", dir);
    snprintf(first_log, sizeof first_log, "%s/coordinator-first.log", dir);
    snprintf(vlog, sizeof vlog, "%s/client-0.log", dir);
    REQUIRE_MSG(hfl_pki_create(pki, 3, "localhost", 1, err) == 0, "%s", err);
    char victim_pem[320];
    snprintf(victim_pem, sizeof victim_pem, "%s/client-0.pem", pki);
    hfl_identity *victim;
    REQUIRE_MSG(hfl_identity_load(victim_pem, &victim, err) == 0, "%s", err);

    pid_t coord = start_coord("tls+tcp://127.0.0.1:0", url);
    REQUIRE_MSG(coord > 0, "coordinator did not start");
    volatile int stop = 0;
    flooder f[FLOOD_CONNS];
    pthread_t th[FLOOD_CONNS];
    for (int i = 0; i < FLOOD_CONNS; i++) {
        f[i] = (flooder){.victim_cert = hfl_identity_cert(victim), .stop = &stop};
        snprintf(f[i].url, sizeof f[i].url, "%s", url);
        pthread_create(&th[i], NULL, flood, &f[i]);
    }
    double t_flood = hfl_now();
    hfl_sleep_ms(500); /* the flood is on before the victim starts */
    pid_t clients[2];
    double t0 = hfl_now();
    for (int i = 0; i < 2; i++) {
        char pem[320], clog[400], idx[8];
        snprintf(pem, sizeof pem, "%s/client-%d.pem", pki, i);
        snprintf(clog, sizeof clog, "%s/client-%d.log", dir, i);
        snprintf(idx, sizeof idx, "%d", i);
        char *cargv[] = {argv[2], "--coordinator", url, "--ca", ca, "--cert", pem, "--client-index", idx,
                         "--num-clients", "20", i ? "--pace" : NULL, "1", "--link", "20:20:0", NULL};
        clients[i] = harness_spawn(cargv, clog);
    }
    while (rounds_done() < 2 || !file_has(vlog, "expired")) { /* then the coordinator dies */
        REQUIRE_MSG(hfl_now() - t0 < 120, "round 2 did not close, or the victim's token did not expire, in 120 s");
        REQUIRE_MSG(harness_poll(coord) == -2, "the coordinator exited before round 2 closed");
        check_clients(clients);
        hfl_sleep_ms(50);
    }
    long sent_before = 0; /* the flood's rate while the first coordinator served it */
    for (int i = 0; i < FLOOD_CONNS; i++) sent_before += __atomic_load_n(&f[i].sent, __ATOMIC_RELAXED);
    double rate_before = sent_before / (hfl_now() - t_flood);
    kill(coord, SIGKILL);
    REQUIRE(harness_wait(coord, 10) == 128 + SIGKILL);
    rename(log, first_log);
    int before = rounds_done();
    printf("coordinator killed after round %d (%.1f s); starting it again\n", before, hfl_now() - t0);
    REQUIRE_MSG(before <= ROUNDS - 4, "only %d of %d rounds were left for the victim to rejoin the restarted "
                "coordinator", ROUNDS - before, ROUNDS);
    coord = start_coord(url, again);
    REQUIRE_MSG(coord > 0 && !strcmp(url, again), "coordinator did not start again on %s", url);
    int rc = -2;
    while (rc == -2) {
        REQUIRE_MSG(hfl_now() - t0 < 240, "the run did not end in 240 s");
        rc = harness_poll(coord);
        REQUIRE_MSG(rc == -2 || rc == 0, "the coordinator exited with %d", rc);
        check_clients(clients);
        hfl_sleep_ms(50);
    }
    double wall = hfl_now() - t0 + 0.5;
    stop = 1;
    long sent = 0, challenged = 0, limited = 0, other = 0, failed = 0;
    for (int i = 0; i < FLOOD_CONNS; i++) {
        pthread_join(th[i], NULL);
        sent += f[i].sent, challenged += f[i].challenged, limited += f[i].limited, other += f[i].other;
        failed += f[i].failed;
    }
    for (int i = 0; i < 2; i++)
        if (clients[i]) CHECK_MSG(harness_wait(clients[i], 60) == 0, "client-%d failed", i);
    printf("flood: %ld first hellos in %.1f s (%.0f a second; %.0f a second before the restart): %ld challenges for "
           "the victim's name, %ld told to slow down, %ld otherwise answered, %ld unanswered or not dialed (the "
           "restart)\n",
           sent, wall, sent / wall, rate_before, challenged, limited, other, failed);
    if (getenv("HFL_SANITIZED")) /* a sanitized coordinator answers more slowly than the flood asks */
        printf("sanitized build: the flood's rate is not checked\n");
    else
        CHECK_MSG(rate_before > 150, "the flood ran at %.0f a second, not 200", rate_before);
    CHECK_MSG(challenged > 100, "only %ld challenges were issued to the flood", challenged);

    CHECK_MSG(!file_has(first_log, "carries no challenge") && !file_has(log, "carries no challenge") &&
                  !file_has(vlog, "carries no challenge"),
              "a hello found its challenge gone");
    CHECK_MSG(file_has(vlog, "expired"), "the victim's token never expired");
    CHECK_MSG(file_has(vlog, "a new coordinator instance"), "the victim did not rejoin the restarted coordinator");
    char *text = hfl_read_file(report, NULL, err);
    REQUIRE_MSG(text, "%s", err);
    cJSON *r = cJSON_Parse(text);
    free(text);
    const cJSON *round;
    int drawn = 0, ok = 0;
    cJSON_ArrayForEach(round, cJSON_GetObjectItemCaseSensitive(r, "rounds")) {
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(round, "participants")) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name"));
            const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "status"));
            if (!name || strcmp(name, "client-0")) continue;
            drawn++;
            ok += st && !strcmp(st, "ok");
        }
    }
    const cJSON *refused = cJSON_GetObjectItemCaseSensitive(r, "hellos_refused");
    printf("the victim finished %d of the %d rounds it was drawn into; hellos refused (the second coordinator): "
           "%g rate-limited, %g with no pending challenge\n",
           ok, drawn, cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(refused, "rate_limited")),
           cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(refused, "challenge_not_pending")));
    CHECK_MSG(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "rounds")) == ROUNDS && drawn == ROUNDS &&
                  ok == drawn,
              "the victim finished %d of the %d rounds it was drawn into", ok, drawn);
    cJSON_Delete(r);
    hfl_identity_free(victim);
    harness_cleanup();
    nng_fini(); /* the flood's closed sockets are torn down by NNG's own threads; wait for them, or
                 * LeakSanitizer, running at exit, reports their TLS state (seen under load) */
    return check_exit_code("test_hello_flood");
}
