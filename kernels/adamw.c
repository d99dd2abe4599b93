/* adamw.c: the host side of the backends' AdamW (kernels/backend.h). */
#include "kernels/backend.h"
#include "kernels/ops_hd.h"

hfl_adamw_args hfl_adamw_make(float lr, float beta1, float beta2, float eps, float wd, long step) {
    hfl_adamw_args a = {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .wd = wd};
    hfl_step_scalars sc = {.finite = 1, .adam_beta1_pow = 1.0, .adam_beta2_pow = 1.0};
    for (long s = 0; s < step; s++) hfl_op_adamw_count(&sc, beta1, beta2, NULL);
    hfl_op_adamw_bias(&sc, &a);
    return a;
}
