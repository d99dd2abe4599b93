/* adamw_make.h: AdamW's per-step constants for step number `step` (1, 2,
 * ...), for the tests that run adamw_step at a chosen step with sc NULL
 * (kernels/ops_hd.h, AdamW): the bias corrections adamw_step computes on
 * the device after `step` counted steps, bit for bit (the same bodies; one
 * multiplication a step). */
#ifndef HFL_TESTS_KERNELS_ADAMW_MAKE_H
#define HFL_TESTS_KERNELS_ADAMW_MAKE_H

#include "kernels/backend.h"
#include "kernels/ops_hd.h"

static inline hfl_adamw_args adamw_make(float lr, float beta1, float beta2, float eps, float wd, long step) {
    hfl_adamw_args a = {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .wd = wd};
    hfl_step_scalars sc = {.finite = 1, .adam_beta1_pow = 1.0, .adam_beta2_pow = 1.0};
    for (long s = 0; s < step; s++) hfl_op_adamw_count(&sc, beta1, beta2, NULL);
    hfl_op_adamw_bias(&sc, &a);
    return a;
}

#endif
