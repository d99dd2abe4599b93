/* challenges.h: hello challenges awaiting their signed answer (auth.c).
 *
 * A challenge is found by its own value, which the coordinator drew at
 * random and sent only to the connection that asked, so no hello can cancel
 * another's: a first hello that carries a victim's (public) certificate adds
 * a challenge of its own and leaves the victim's where it was. The table is
 * bounded three ways, each by displacing the challenge that hurts least:
 *   - a connection holds at most CHALLENGES_PER_CONN: a new one displaces
 *     that connection's own oldest (an honest client has one hello in
 *     flight at a time);
 *   - an identity holds at most CHALLENGES_PER_NAME: a new one displaces the
 *     oldest of that identity's challenges issued to the same address as the
 *     new one, so a flood from one address can only displace its own; from
 *     the victim's own address too, it would have to issue that many for the
 *     victim's name within the victim's round trip, which the per-address
 *     rate limit (conns.c) forbids;
 *   - the whole table holds `capacity`, CONNS_MAX connections' worth: past
 *     it (challenges of connections that closed) the oldest goes.
 * A challenge is good for CHALLENGE_TTL_S seconds and spent once. Not
 * thread-safe: auth.c calls it under the coordinator's lock. */
#ifndef HFL_COORD_CHALLENGES_H
#define HFL_COORD_CHALLENGES_H

#include <stdint.h>

#define CHALLENGES_PER_CONN 2
#define CHALLENGES_PER_NAME 64
#define CHALLENGE_TTL_S 30.0

typedef struct coord_challenges coord_challenges;

coord_challenges *challenges_new(int capacity);
void challenges_free(coord_challenges *t);
/* Keeps `challenge` (64 hex digits) for identity `name`, issued at `now` on
 * connection `conn` from address `addr` (conns.c's folded address). */
void challenges_add(coord_challenges *t, const char *name, const char *challenge, uint32_t conn, uint64_t addr,
                    double now);
/* Spends `challenge` if it is pending for `name` and fresh: 0, else -1. */
int challenges_spend(coord_challenges *t, const char *name, const char *challenge, double now);
/* Whether `challenge` is pending and fresh for anyone: a hello whose
 * challenge is not is refused before any signature is checked. */
int challenges_known(const coord_challenges *t, const char *challenge, double now);
/* Challenges pending and fresh at `now`. */
int challenges_pending(const coord_challenges *t, double now);

#endif
