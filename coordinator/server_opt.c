/* server_opt.c: FedAvg, FedAvgM, FedAdam, FedYogi on the coordinator (see server_opt.h). */
#include "coordinator/server_opt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/agg.h"
#include "kernels/backend.h"
#include "util/util.h"

_Static_assert((int)HFL_SOPT_FEDAVG == (int)HFL_AGG_SOPT_FEDAVG && (int)HFL_SOPT_FEDAVGM == (int)HFL_AGG_SOPT_FEDAVGM &&
                   (int)HFL_SOPT_FEDADAM == (int)HFL_AGG_SOPT_FEDADAM &&
                   (int)HFL_SOPT_FEDYOGI == (int)HFL_AGG_SOPT_FEDYOGI &&
                   (int)HFL_SOPT_NESTEROV == (int)HFL_AGG_SOPT_NESTEROV,
               "server_opt.h and agg_hd.h list the optimizers in one order");

static const char *const names[] = {"fedavg", "fedavgm", "fedadam", "fedyogi", "nesterov"};

int hfl_sopt_parse(const char *spec, hfl_server_opt *o, char *err) {
    memset(o, 0, sizeof *o);
    double v[2] = {NAN, NAN};
    int args, k = hfl_parse_choice(spec, names, 5, v, 2, &args);
    double a = v[0], b = v[1];
    int momentum = k == HFL_SOPT_FEDAVGM || k == HFL_SOPT_NESTEROV; /* takes a second parameter */
    if (k < 0 || (momentum ? args > 2 : args > 1))
        return hfl_errf(err, "unknown server optimizer '%s' (fedavg[:lr], fedavgm[:lr[:beta]], fedadam[:lr], fedyogi[:lr], "
                        "nesterov[:lr[:mu]])", spec);
    o->kind = (hfl_sopt_kind)k;
    o->lr = k == HFL_SOPT_NESTEROV ? 0.7 : k >= HFL_SOPT_FEDADAM ? 0.01 : 1.0; /* nesterov: DiLoCo's */
    o->beta1 = 0.9, o->beta2 = 0.99, o->tau = 1e-3;
    if (args >= 1) o->lr = a;
    if (args >= 2) o->beta1 = b;
    if (!(o->lr > 0 && o->lr <= 100) || !(o->beta1 >= 0 && o->beta1 < 1))
        return hfl_errf(err, "server optimizer '%s': lr must be in (0, 100] and beta in [0, 1)", spec);
    return 0;
}

int hfl_sopt_init(hfl_server_opt *o, size_t n, char *err) {
    o->n = n;
    if (o->kind == HFL_SOPT_FEDAVG) return 0;
    int moments = o->kind == HFL_SOPT_FEDADAM || o->kind == HFL_SOPT_FEDYOGI; /* else v is a momentum */
    o->v = calloc(n ? n : 1, sizeof(float));
    o->m = moments ? calloc(n ? n : 1, sizeof(float)) : NULL;
    if (!o->v || (moments && !o->m))
        return hfl_errf(err, "cannot allocate the server optimizer's state for %zu values", n);
    return 0;
}

void hfl_sopt_free(hfl_server_opt *o) {
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

void hfl_sopt_step_on(const hfl_server_opt *o, const hfl_backend *be, float *x, float *m, float *v,
                      const float *d) {
    /* hfl_sopt_kind and HFL_AGG_SOPT_* list the optimizers in one order */
    hfl_agg_sopt a = {.kind = (int)o->kind, .lr = o->lr, .beta1 = o->beta1, .beta2 = o->beta2, .tau = o->tau};
    be->agg->sopt_step(&a, x, m, v, d, o->n);
}
