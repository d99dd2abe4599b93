/* server_opt.h: how the coordinator moves the global model by a round's
 * aggregate (--server-opt), after Reddi et al. 2021, "Adaptive Federated
 * Optimization" (Algorithm 2), with the round's mean client delta D as the
 * pseudo-gradient's negative:
 *   fedavg            x += lr * D                              (lr 1: FedAvg)
 *   fedavgm[:lr[:b]]  v = b v + D;  x += lr * v                (Hsu et al. 2019; lr 1, b 0.9)
 *   fedadam[:lr]      m = b1 m + (1 - b1) D;  v = b2 v + (1 - b2) D^2;
 *                     x += lr * m / (sqrt(v) + tau)            (lr 0.01, b1 0.9, b2 0.99, tau 1e-3)
 *   fedyogi[:lr]      as fedadam with v = v - (1 - b2) D^2 sign(v - D^2)
 *   nesterov[:lr[:mu]] v = mu v + D;  x += lr * (D + mu v)   (lr 0.7, mu 0.9)
 *                     DiLoCo's outer step (Douillard et al. 2023, Algorithm
 *                     1): PyTorch's SGD with Nesterov momentum on the outer
 *                     gradient -D, written in D's sign
 * Each element is updated in double from its float state, so the result is a
 * fixed function of (state, D): order-independent sums stay exact through it.
 * The state (m, v) lives as long as the run; it is part of what a checkpoint
 * of the coordinator has to keep. */
#ifndef HFL_COORD_SERVER_OPT_H
#define HFL_COORD_SERVER_OPT_H

#include <stddef.h>

struct hfl_backend;

typedef enum { HFL_SOPT_FEDAVG, HFL_SOPT_FEDAVGM, HFL_SOPT_FEDADAM, HFL_SOPT_FEDYOGI, HFL_SOPT_NESTEROV } hfl_sopt_kind;

typedef struct {
    hfl_sopt_kind kind;
    double lr, beta1, beta2, tau;
    size_t n;
    float *m, *v; /* first and second moments (fedavgm, nesterov: v is the momentum, m NULL); NULL for fedavg */
    int steps;
} hfl_server_opt;

/* "fedavg", "fedavgm[:lr[:beta]]", "fedadam[:lr]", "fedyogi[:lr]",
 * "nesterov[:lr[:mu]]" into o (no state yet); -1 with err naming the
 * accepted forms. */
int hfl_sopt_parse(const char *spec, hfl_server_opt *o, char *err);
/* Allocates zeroed state for n values; -1 with err when memory is short. */
int hfl_sopt_init(hfl_server_opt *o, size_t n, char *err);
void hfl_sopt_free(hfl_server_opt *o);
/* One server step: x moves by the round's mean delta d (n values), on
 * backend be's memory (kernels/agg.h's sopt_step, the one
 * kernels/agg_hd.h body on both backends), with the moments at m and v
 * (NULL where o has none); o->steps is the caller's to count. */
void hfl_sopt_step_on(const hfl_server_opt *o, const struct hfl_backend *be, float *x, float *m, float *v,
                      const float *d);

#endif
