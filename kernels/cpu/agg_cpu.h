/* agg_cpu.h: the CPU backend's aggregation ops (kernels/agg.h), and its
 * chunk decoder, which tests/kernels/test_agg_bodies.c checks against
 * compress/payload_hd.h's element body. */
#ifndef HFL_AGG_CPU_H
#define HFL_AGG_CPU_H

#include <stddef.h>

#include "kernels/agg.h"

extern const hfl_agg_ops hfl_cpu_agg_ops;

/* out[j] = hfl_payload_value(p, i0 + j) for j < m. */
void hfl_agg_decode_span(const hfl_payload *p, size_t i0, size_t m, float *out);

#endif
