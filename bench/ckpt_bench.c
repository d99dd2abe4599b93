/* ckpt_bench.c: how long hfl_ckpt_schedule takes on 40-layer chains.
 *
 * Three families of chains: uniform layers; a transformer-like stack (8
 * blocks of layernorm, qkv, attention scores (softmax: needs its output),
 * projection, mlp (4x, GELU: needs its output)); and random layers (bytes
 * uniform in 1..1e6, costs uniform, needs_output a coin flip; every layer
 * reads its input in backward) — the hard
 * case: with unrelated sizes and costs the problem contains 0/1 knapsack, so
 * the exact frontiers can grow. For each, the median and worst time of
 * `optimal` at budgets 10%, 50% and 90% of the way from the least peak to
 * storing everything, and of `full`. The ratio reported is against brute
 * force over all 2^19 sets of a 20-layer chain of the same family.
 * Usage: bench-ckpt [chains per family, default 50] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan/checkpoint.h"
#include "util/util.h"

enum { N = 40 };

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

/* A layer that reads its input in backward (and its output when no). */
static hfl_ckpt_layer lay(double cost, size_t bytes, int no) {
    return (hfl_ckpt_layer){.cost = cost, .out_bytes = bytes, .needs_output = no, .needs_input = 1};
}

static void make_chain(int family, int n, hfl_ckpt_layer *L, size_t *in_bytes) {
    const size_t tok = 8 * 512, d = 768, f32 = 4; /* batch 8 x 512 tokens, width 768 */
    *in_bytes = tok * d * f32;
    for (int i = 0; i < n; i++) {
        if (family == 0) {
            L[i] = lay(1e9, 64u << 20, 0);
        } else if (family == 1) {
            switch (i % 5) {
            case 0: L[i] = lay(5.0 * tok * d, tok * d * f32, 0); break;
            case 1: L[i] = lay(2.0 * tok * d * 3 * d, tok * 3 * d * f32, 0); break;
            case 2: L[i] = lay(4.0 * tok * 512 * d, 8 * 12 * 512 * 512 * f32, 1); break;
            case 3: L[i] = lay(2.0 * tok * d * d, tok * d * f32, 0); break;
            default: L[i] = lay(16.0 * tok * d * d, tok * 4 * d * f32, 1); break;
            }
        } else {
            L[i] = lay(1.0 + (double)(rnd() % 1000000), 1 + rnd() % 1000000, (int)(rnd() & 1));
        }
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long chains = 50;
    char err[HFL_ERR_LEN];
    if (argc > 1 && hfl_parse_int(argv[1], 1, 100000, &chains, err)) {
        fprintf(stderr, "bench-ckpt: %s\n", err);
        return 2;
    }
    static const char *fam_name[] = {"uniform", "transformer", "random"};
    static const double fracs[] = {0.1, 0.5, 0.9};
    double *t = hfl_malloc((size_t)chains * sizeof *t);
    hfl_ckpt_layer L[N];
    for (int fam = 0; fam < 3; fam++) {
        for (int which = 0; which < 4; which++) { /* 3 budgets for optimal, then full */
            double worst = 0.0, sum_rec = 0.0;
            for (long c = 0; c < chains; c++) {
                hfl_ckpt_chain ch = {.n = N, .layers = L};
                make_chain(fam, N, L, &ch.in_bytes);
                hfl_ckpt_plan none, p;
                if (hfl_ckpt_schedule(&ch, HFL_CKPT_NONE, SIZE_MAX, &none, err)) {
                    fprintf(stderr, "bench-ckpt: %s\n", err);
                    return 1;
                }
                hfl_ckpt_kind k = which < 3 ? HFL_CKPT_OPTIMAL : HFL_CKPT_FULL;
                size_t budget = which < 3 ? none.min_peak + (size_t)(fracs[which] *
                                                (double)(none.peak - none.min_peak))
                                          : SIZE_MAX;
                double t0 = hfl_now();
                int rc = hfl_ckpt_schedule(&ch, k, budget, &p, err);
                t[c] = hfl_now() - t0;
                if (rc || (k == HFL_CKPT_OPTIMAL && !p.feasible)) {
                    fprintf(stderr, "bench-ckpt: %s\n", rc ? err : "infeasible");
                    return 1;
                }
                if (t[c] > worst) worst = t[c];
                sum_rec += p.recompute / p.forward;
            }
            qsort(t, (size_t)chains, sizeof *t, cmp_d);
            char what[32];
            if (which < 3) snprintf(what, sizeof what, "optimal@%.0f%%", 100 * fracs[which]);
            else snprintf(what, sizeof what, "full");
            printf("n=%d %-11s %-12s median %8.1f us  worst %9.1f us  recompute %.2f of a forward\n",
                   N, fam_name[fam], what, 1e6 * t[chains / 2], 1e6 * worst,
                   sum_rec / (double)chains);
        }
        /* Reference: brute force over every set of a 20-layer chain. */
        hfl_ckpt_layer B[20];
        hfl_ckpt_chain bc = {.n = 20, .layers = B};
        make_chain(fam, 20, B, &bc.in_bytes);
        double t0 = hfl_now(), best = 1e300;
        unsigned char st[21];
        for (unsigned mask = 0; mask < (1u << 19); mask++) {
            st[0] = st[20] = 1;
            for (int i = 1; i < 20; i++) st[i] = (mask >> (i - 1)) & 1u;
            hfl_ckpt_plan p;
            if (hfl_ckpt_evaluate(&bc, st, &p, err) == 0 && p.recompute < best) best = p.recompute;
        }
        double tb = hfl_now() - t0;
        t0 = hfl_now();
        hfl_ckpt_plan p;
        hfl_ckpt_schedule(&bc, HFL_CKPT_FULL, SIZE_MAX, &p, err);
        double td = hfl_now() - t0;
        printf("n=20 %-11s brute force %.1f ms, DP (full) %.1f us: ratio %.0fx\n",
               fam_name[fam], 1e3 * tb, 1e6 * td, tb / td);
    }
    free(t);
    return 0;
}
