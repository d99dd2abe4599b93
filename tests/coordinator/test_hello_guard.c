/* test_hello_guard.c: the pending hello challenges (coordinator/challenges.c)
 * and the token buckets behind --hello-rate (coordinator/rate.c), with the
 * clock given by hand (an insider cannot deny service).
 *
 * Challenges:
 *   1. A flood of first hellos carrying the victim's name, from another
 *      connection and address, never displaces the victim's challenge: it is
 *      spent after 1,000 of them (the old table, one challenge per name,
 *      lost it to the first).
 *   2. From the victim's own address, on 500 connections: the victim's
 *      survives up to CHALLENGES_PER_NAME - 1 later ones for its name, and
 *      a flood from another address never displaces it even past the bound.
 *   3. A connection holds at most CHALLENGES_PER_CONN: its third displaces
 *      its own first, never another connection's.
 *   4. Spent once, only by the name it was issued to, only while fresh
 *      (CHALLENGE_TTL_S); an unknown value is refused, and known to be
 *      unknown before any signature is checked (challenges_known).
 *   5. A full table displaces its oldest.
 * Rates:
 *   6. 5 per second: a burst of 10, then one every 0.2 s, the wait said; keys
 *      apart; rate 0 is no limit; a full table gives the fullest slot away. */
#include <stdio.h>
#include <string.h>

#include "coordinator/challenges.h"
#include "coordinator/rate.h"
#include "tests/check.h"

/* A distinct 64-hex-digit challenge for (a, b). */
static void value(char out[65], int a, int b) { snprintf(out, 65, "%032x%032x", a, b); }

static void test_flood_elsewhere(void) {
    coord_challenges *t = challenges_new(8192);
    char v[65], x[65];
    value(v, 1, 0);
    challenges_add(t, "victim", v, 1, 0xA, 100.0);
    for (int i = 0; i < 1000; i++) {
        value(x, 2, i);
        challenges_add(t, "victim", x, 2, 0xB, 100.0 + i * 1e-4); /* one connection, 1,000 first hellos */
    }
    CHECK(challenges_pending(t, 100.2) == 1 + CHALLENGES_PER_CONN);
    CHECK_MSG(challenges_spend(t, "victim", v, 100.2) == 0, "the flood displaced the victim's challenge");
    challenges_free(t);
}

static void test_flood_same_address(void) {
    coord_challenges *t = challenges_new(8192);
    char v[65], x[65];
    value(v, 1, 0);
    challenges_add(t, "victim", v, 1, 0xA, 100.0);
    for (int i = 0; i < CHALLENGES_PER_NAME - 1; i++) { /* each on a connection of its own */
        value(x, 3, i);
        challenges_add(t, "victim", x, (uint32_t)(100 + i), 0xA, 100.0 + (i + 1) * 1e-4);
    }
    CHECK_MSG(challenges_spend(t, "victim", v, 100.1) == 0, "displaced before the bound");
    challenges_add(t, "victim", v, 1, 0xA, 100.1); /* again, then one more from its address: the oldest goes */
    for (int i = 0; i < CHALLENGES_PER_NAME; i++) {
        value(x, 4, i);
        challenges_add(t, "victim", x, (uint32_t)(1000 + i), 0xA, 100.2 + i * 1e-4);
    }
    CHECK(challenges_spend(t, "victim", v, 100.3) == -1);
    /* the victim elsewhere: a flood from 0xB on 500 connections displaces only its own */
    challenges_add(t, "victim", v, 2000, 0xC, 100.4);
    for (int i = 0; i < 500; i++) {
        value(x, 5, i);
        challenges_add(t, "victim", x, (uint32_t)(3000 + i), 0xB, 100.5 + i * 1e-4);
    }
    CHECK_MSG(challenges_spend(t, "victim", v, 100.6) == 0, "a flood from another address displaced it");
    challenges_free(t);
}

static void test_per_connection(void) {
    coord_challenges *t = challenges_new(8192);
    char a[65], b[65], c[65], other[65];
    value(a, 6, 1), value(b, 6, 2), value(c, 6, 3), value(other, 6, 4);
    challenges_add(t, "other", other, 8, 0xA, 1.0);
    challenges_add(t, "x", a, 7, 0xA, 1.1);
    challenges_add(t, "y", b, 7, 0xA, 1.2);
    challenges_add(t, "z", c, 7, 0xA, 1.3);
    CHECK(challenges_spend(t, "x", a, 2) == -1); /* its connection's oldest */
    CHECK(challenges_spend(t, "y", b, 2) == 0 && challenges_spend(t, "z", c, 2) == 0);
    CHECK(challenges_spend(t, "other", other, 2) == 0);
    challenges_free(t);
}

static void test_spend(void) {
    coord_challenges *t = challenges_new(16);
    char v[65], u[65];
    value(v, 7, 1), value(u, 7, 2);
    challenges_add(t, "v", v, 1, 0xA, 10.0);
    CHECK(challenges_known(t, v, 11) && !challenges_known(t, u, 11));
    CHECK(!challenges_known(t, v, 10.0 + CHALLENGE_TTL_S + 0.5)); /* stale */
    CHECK(challenges_spend(t, "w", v, 11) == -1);  /* another identity's */
    CHECK(challenges_spend(t, "v", u, 11) == -1);  /* not issued (yet) */
    CHECK(challenges_spend(t, "v", v, 10.0 + CHALLENGE_TTL_S + 0.5) == -1); /* expired */
    challenges_add(t, "v", u, 1, 0xA, 20.0);
    CHECK(challenges_spend(t, "v", u, 20.0 + CHALLENGE_TTL_S - 0.5) == 0);
    CHECK(challenges_spend(t, "v", u, 21) == -1); /* spent */
    CHECK(challenges_pending(t, 21) == 1); /* v, never spent, fresh until 40 */
    challenges_free(t);
}

static void test_full_table(void) {
    coord_challenges *t = challenges_new(4);
    char x[65];
    for (int i = 0; i < 5; i++) {
        value(x, 8, i);
        char name[8];
        snprintf(name, sizeof name, "n%d", i);
        challenges_add(t, name, x, (uint32_t)i + 1, (uint64_t)i + 1, 1.0 + i);
    }
    CHECK(challenges_pending(t, 6) == 4);
    value(x, 8, 0);
    CHECK(challenges_spend(t, "n0", x, 6) == -1); /* the oldest */
    value(x, 8, 4);
    CHECK(challenges_spend(t, "n4", x, 6) == 0);
    challenges_free(t);
}

static void test_rate(void) {
    rate_table *t = rate_new(2);
    double w;
    for (int i = 0; i < 10; i++) {
        CHECK(rate_has(t, 7, 5, 0.0, &w) == 1 && w == 0);
        rate_take(t, 7, 5, 0.0);
    }
    CHECK(rate_has(t, 7, 5, 0.0, &w) == 0 && w > 0.199 && w < 0.201);
    CHECK(rate_has(t, 8, 5, 0.0, &w) == 1); /* another key, its own bucket */
    CHECK(rate_has(t, 7, 5, 0.1, &w) == 0 && w > 0.099 && w < 0.101);
    CHECK(rate_has(t, 7, 5, 0.2001, &w) == 1);
    rate_take(t, 7, 5, 0.2001);
    CHECK(rate_has(t, 7, 5, 0.2002, &w) == 0);
    CHECK(rate_has(t, 7, 0, 0.2002, &w) == 1 && w == 0); /* 0: no limit */
    rate_take(t, 8, 5, 0.3);
    /* the table is full (7 and 8): key 9 takes the fullest slot, 8's, and starts full */
    CHECK(rate_has(t, 9, 5, 0.3, &w) == 1);
    CHECK(rate_has(t, 7, 5, 0.3, &w) == 0); /* 7, emptier, kept its bucket */
    rate_free(t);
}

static const check_case cases[] = {
    {"flood_elsewhere", test_flood_elsewhere},
    {"flood_same_address", test_flood_same_address},
    {"per_connection", test_per_connection},
    {"spend", test_spend},
    {"full_table", test_full_table},
    {"rate", test_rate},
};

int main(int argc, char **argv) {
    return check_run("test_hello_guard", cases, CHECK_CASES(cases), argc, argv);
}
