/* test_overhead.c: the overhead model (model/overhead.h) on hand-made
 * measurements whose medians are worked out here: the prior before any
 * measurement (host and device), the fleet's estimate, one median per
 * precision class and the other class as the fallback, the exact host
 * staging term, noise below zero, and the ring of the newest records. */
#include <stdlib.h>
#include <string.h>

#include "model/overhead.h"
#include "tests/check.h"

#define MiB 1048576.0

int main(void) {
    hfl_overhead_model *m = malloc(sizeof *m);
    /* staging: batch * (in_dim + 1) floats on the host, nothing on a device */
    CHECK(hfl_overhead_staging(1, 32, 784, 1) == 32u * 785 * 4);
    CHECK(hfl_overhead_staging(1, 32, 64, 64) == 32u * 128 * 4); /* a language model: T labels */
    CHECK(hfl_overhead_staging(0, 32, 784, 1) == 0);

    hfl_overhead_init(m, 1, 784, 1, 0);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 8) == HFL_OVERHEAD_PRIOR_HOST + 8u * 785 * 4);
    CHECK(!strcmp(hfl_overhead_source(m, HFL_PREC_BF16), "prior"));
    hfl_overhead_init(m, 0, 784, 1, 0);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP16, 8) == HFL_OVERHEAD_PRIOR_DEVICE);
    hfl_overhead_init(m, 1, 784, 1, 3 * MiB); /* the fleet's figure is a whole overhead */
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 64) == (uint64_t)(3 * MiB));
    CHECK(!strcmp(hfl_overhead_source(m, HFL_PREC_FP32), "fleet"));

    /* fp32 extras 1, 3, 2 MiB (measured - arena - staging) at any batch and
     * arena: the fp32 median is 2 MiB, for any batch, plus that batch's staging */
    hfl_overhead_init(m, 1, 100, 1, 3 * MiB);
    hfl_overhead_add(m, HFL_PREC_FP32, 1, 10 * MiB, 404, 10 * MiB + 404 + 1 * MiB);
    hfl_overhead_add(m, HFL_PREC_FP32, 512, 50 * MiB, 0, 50 * MiB + 3 * MiB); /* another model's: no staging */
    hfl_overhead_add(m, HFL_PREC_FP32, 32, 20 * MiB, 1000, 20 * MiB + 1000 + 2 * MiB);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 16) == 16u * 101 * 4 + (uint64_t)(2 * MiB));
    CHECK(!strcmp(hfl_overhead_source(m, HFL_PREC_FP32), "class"));
    /* no 2-byte measurement yet: fp32's median stands in */
    CHECK(hfl_overhead_predict(m, HFL_PREC_BF16, 1) == 404 + (uint64_t)(2 * MiB));
    CHECK(!strcmp(hfl_overhead_source(m, HFL_PREC_FP16), "other-class"));
    /* bf16 and fp16 are one class: extras 5 and 7 MiB, median 6 MiB */
    hfl_overhead_add(m, HFL_PREC_BF16, 8, 1 * MiB, 0, 6 * MiB);
    hfl_overhead_add(m, HFL_PREC_FP16, 8, 1 * MiB, 0, 8 * MiB);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP16, 1) == 404 + (uint64_t)(6 * MiB));
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 1) == 404 + (uint64_t)(2 * MiB)); /* unchanged */

    /* a class whose measurements came in under the arena (noise) adds no extra */
    hfl_overhead_init(m, 0, 100, 1, 0);
    hfl_overhead_add(m, HFL_PREC_FP32, 8, 10 * MiB, 0, 9 * MiB);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 8) == 0);

    /* the newest HFL_OVERHEAD_MAX records count: an old outlier ages out */
    hfl_overhead_init(m, 0, 100, 1, 0);
    hfl_overhead_add(m, HFL_PREC_FP32, 8, 0, 0, 100 * MiB);
    for (int i = 0; i < HFL_OVERHEAD_MAX; i++) hfl_overhead_add(m, HFL_PREC_FP32, 8, 0, 0, (i % 2 ? 1 : 3) * MiB);
    CHECK(m->n == HFL_OVERHEAD_MAX && m->rec[0].extra == 3 * MiB);
    CHECK(hfl_overhead_predict(m, HFL_PREC_FP32, 8) == (uint64_t)(2 * MiB)); /* even count: mean of 1 and 3 */
    free(m);
    return check_exit_code("test_overhead");
}
