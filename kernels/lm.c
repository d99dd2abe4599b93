/* lm.c: host-side helpers of the transformer ops (kernels/lm.h). */
#include <math.h>

#include "kernels/lm.h"

hfl_adamw_args hfl_adamw_make(float lr, float beta1, float beta2, float eps, float wd, long step) {
    double bc1 = 1.0 - pow((double)beta1, (double)step), bc2 = 1.0 - pow((double)beta2, (double)step);
    return (hfl_adamw_args){.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .wd = wd,
                            .step_size = (float)(lr / bc1), .bc2_sqrt = (float)sqrt(bc2)};
}
