/* precision.c: the training precisions' names (model/model.h).
 *
 * "fp32", "bf16" and "fp16" name hfl_precision (kernels/backend.h), the
 * storage type of a step's activations and working weights; what each
 * precision plans and runs is in plan/planner.h (PRECISION) and
 * model/trainer.c. Names are lowercase and case-sensitive, like the
 * checkpoint kinds'. */
#include <string.h>

#include "model/model.h"
#include "util/util.h"

static const char *const precision_names[] = {
    [HFL_PREC_FP32] = "fp32",
    [HFL_PREC_BF16] = "bf16",
    [HFL_PREC_FP16] = "fp16",
};

#define N_PRECISIONS (int)(sizeof precision_names / sizeof precision_names[0])

int hfl_precision_parse(const char *name, hfl_precision *prec, char *err) {
    for (int k = 0; name && k < N_PRECISIONS; k++)
        if (strcmp(name, precision_names[k]) == 0) {
            *prec = (hfl_precision)k;
            return 0;
        }
    return hfl_errf(err, "unknown precision '%s' (fp32, bf16 or fp16)", name ? name : "(null)");
}

const char *hfl_precision_name(hfl_precision prec) {
    return (unsigned)prec < (unsigned)N_PRECISIONS ? precision_names[prec] : "?";
}
