/* netns.h: hfl-sim --netns: every client in a network namespace of its own,
 * on a veth pair to the host, its link shaped by the kernel's queueing
 * disciplines from its device profile (scenarios/profile.h), so a fleet's
 * transfers meet real TCP over real rate limits instead of the simulated
 * clock's formula. Needs root (CAP_NET_ADMIN) and iproute2's ip and tc. */
#ifndef HFL_SIM_NETNS_H
#define HFL_SIM_NETNS_H

#include <signal.h>
#include <stddef.h>

#include "scenarios/profile.h"

typedef struct {
    int n;       /* namespaces made (clients 0 .. n-1) */
    int tag;     /* hfl-sim's pid, in every name */
    int netem;   /* 1: sch_netem works here (latency applied); 0: tbf alone (rate
                    only); -1: no link was shaped */
    int shaped;  /* clients whose profile gave a link */
    int base;    /* B of the run's addresses 10.B.x.y: 200-249, none a live run's */
} sim_netns;

/* Client i's namespace, veth pair, addresses and shaping, for i < clients:
 * the host end 10.B.X.Y+1/30 (sim_netns_host_ip), the client end +2; the
 * host end's egress (the client's download) and the client end's (its
 * upload) limited to the profile's rates, with its latency each way where
 * sch_netem exists. A client without a profile gets an unshaped link. -1
 * with err (whatever was made is removed again), also when *stop is set
 * (a signal) before it is done. */
int sim_netns_open(sim_netns *nn, int clients, const hfl_profile *profiles, volatile sig_atomic_t *stop,
                   char *err);
/* Client i's namespace name ("hfl-<tag>-<B>-<i>"), for `ip netns exec`. */
void sim_netns_name(const sim_netns *nn, int i, char *out, size_t n);
/* The host end's address of client i's link: what the client dials. */
void sim_netns_host_ip(const sim_netns *nn, int i, char *out, size_t n);
/* Removes every namespace (their veth pairs go with them). */
void sim_netns_close(sim_netns *nn);

#endif
