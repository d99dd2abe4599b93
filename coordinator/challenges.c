/* challenges.c: hello challenges keyed by their value (see challenges.h).
 *
 * A plain array scanned whole: at most `capacity` entries (8,192 for the
 * coordinator), a few microseconds a scan, and only first and second hellos
 * scan it, at the rates conns.c lets through. Expired entries are dropped as
 * the scans meet them. */
#include "coordinator/challenges.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

typedef struct {
    char challenge[65];
    char name[64];
    uint32_t conn;
    uint64_t addr;
    double at;
} challenge_entry;

struct coord_challenges {
    int n, cap;
    challenge_entry *e;
};

coord_challenges *challenges_new(int capacity) {
    coord_challenges *t = hfl_calloc(1, sizeof *t);
    t->cap = capacity > 0 ? capacity : 1;
    t->e = hfl_calloc((size_t)t->cap, sizeof *t->e);
    return t;
}

void challenges_free(coord_challenges *t) {
    if (!t) return;
    free(t->e);
    free(t);
}

static int challenge_fresh(const challenge_entry *e, double now) { return now - e->at <= CHALLENGE_TTL_S; }

/* Drops the expired entries (swapping the last into their place). */
static void challenges_expire(coord_challenges *t, double now) {
    for (int i = 0; i < t->n;)
        if (!challenge_fresh(&t->e[i], now)) t->e[i] = t->e[--t->n];
        else i++;
}

/* The oldest of the entries that match (conn, or name and, when addr is not
 * 0, addr); -1 when none. *count gets how many match. */
static int challenges_oldest(const coord_challenges *t, const char *name, uint32_t conn, uint64_t addr, int *count) {
    int oldest = -1;
    *count = 0;
    for (int i = 0; i < t->n; i++) {
        const challenge_entry *e = &t->e[i];
        int match = name ? !strcmp(e->name, name) && (!addr || e->addr == addr) : e->conn == conn;
        if (!match) continue;
        (*count)++;
        if (oldest < 0 || e->at < t->e[oldest].at) oldest = i;
    }
    return oldest;
}

void challenges_add(coord_challenges *t, const char *name, const char *challenge, uint32_t conn, uint64_t addr,
                    double now) {
    challenges_expire(t, now);
    int on_conn, of_name, of_name_here, slot = -1;
    int conn_oldest = challenges_oldest(t, NULL, conn, 0, &on_conn);
    int name_oldest = challenges_oldest(t, name, 0, 0, &of_name);
    int here_oldest = challenges_oldest(t, name, 0, addr, &of_name_here);
    if (on_conn >= CHALLENGES_PER_CONN) {
        slot = conn_oldest;
    } else if (of_name >= CHALLENGES_PER_NAME) {
        slot = here_oldest >= 0 ? here_oldest : name_oldest;
    } else if (t->n < t->cap) {
        slot = t->n++;
    } else {
        slot = 0;
        for (int i = 1; i < t->n; i++)
            if (t->e[i].at < t->e[slot].at) slot = i;
    }
    challenge_entry *e = &t->e[slot];
    snprintf(e->challenge, sizeof e->challenge, "%s", challenge);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->conn = conn;
    e->addr = addr;
    e->at = now;
}

int challenges_spend(coord_challenges *t, const char *name, const char *challenge, double now) {
    for (int i = 0; i < t->n; i++) {
        challenge_entry *e = &t->e[i];
        if (strcmp(e->challenge, challenge) != 0) continue;
        /* found by value: spent only by the identity it was issued to, while fresh */
        if (strcmp(e->name, name) != 0 || !challenge_fresh(e, now)) return -1;
        t->e[i] = t->e[--t->n];
        return 0;
    }
    return -1;
}

int challenges_known(const coord_challenges *t, const char *challenge, double now) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->e[i].challenge, challenge)) return challenge_fresh(&t->e[i], now);
    return 0;
}

int challenges_pending(const coord_challenges *t, double now) {
    int n = 0;
    for (int i = 0; i < t->n; i++) n += challenge_fresh(&t->e[i], now);
    return n;
}
