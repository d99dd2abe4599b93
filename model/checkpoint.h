/* checkpoint.h: gradient-checkpointing schedules for a chain of layers.
 *
 * Which activations to keep during forward and which to recompute during
 * backward, under a memory budget (DESIGN.md, "Gradient checkpointing is a
 * schedule"). The schedule is single-level recomputation as in Chen et al.
 * 2016 ("Training deep nets with sublinear memory cost") and PyTorch's
 * checkpoint_sequential; `optimal` is an exact dynamic program in the spirit
 * of Griewank & Walther's revolve and Beaumont et al.'s rotor (2019, chains of
 * unequal layers), restricted to that single-level setting.
 *
 * THE CHAIN. Layers 1..n. Activation a_0 is the input batch (m_0 bytes);
 * layer i reads a_{i-1} and writes a_i (m_i bytes) at forward cost c_i.
 * Backward of layer i reads the gradient g_i (m_i bytes) and a_{i-1}, and
 * also a_i when the layer's needs_output flag is set; it writes g_{i-1}
 * (m_{i-1} bytes), except that layer 1 writes no gradient for the input
 * batch. The loss gradient g_n is the first gradient.
 *
 * A SCHEDULE is the set of stored activations: a_0 and a_n are always stored;
 * any subset of a_1..a_{n-1} may be (2^(n-1) schedules). Stored activations
 * ("checkpoints") split the chain into segments (s, e]: layers s+1..e, with s
 * and e stored and a_{s+1}..a_{e-1} ("internal") not stored.
 *
 * EXECUTION MODEL, from which the accounting follows exactly.
 *   Forward: layer i computes a_i from a_{i-1}; an internal a_{i-1} is freed
 *   once a_i exists. Stored activations are held until the end of backward.
 *   Backward, segments last to first; for segment (s, e]:
 *     1. recompute a_{s+1}..a_{e-1} from a_s (layers s+1..e-1, each once) and
 *        keep them; g_e (from the segment above, or the loss) is live;
 *     2. for i = e down to s+1, run layer i's backward: g_{i-1} is allocated
 *        while g_i is live; then g_i is freed, and each internal activation
 *        is freed right after the last backward step that reads it (a_k is
 *        read by step k+1, and by step k when layer k needs_output).
 *   Parameter gradients, weights and kernel workspace are not activation
 *   memory and are not counted.
 *
 * ACCOUNTING. With R(s,i) = sum of m_k for s < k < i and g(j) = m_j for
 * j > 0, g(0) = 0, the non-stored bytes live during backward step i of
 * segment (s, e] are
 *     W_i = R(s,i) + [i < e and needs_output_i] * m_i + m_i + g(i-1)
 * (recomputed activations still needed, a_i itself if step i reads it and it
 * is internal, g_i and g_{i-1}). The segment's work is W(s,e) = max over
 * s < i <= e of W_i. Then
 *     peak      = sum of m_j over stored j  +  max over segments of W(s,e)
 *     recompute = sum of c_i over internal i (each recomputed exactly once).
 * This is the exact maximum of live activation+gradient bytes over the whole
 * step under the model above: the recompute phase of a segment never exceeds
 * its step e (g_e + all internal <= W_e), and forward step i never exceeds
 * backward step i of the same segment (stored + [a_{i-1} internal] m_{i-1} +
 * m_i <= stored + W_i). A framework that also frees each checkpoint once
 * backward has passed it peaks at or below this figure.
 * The needs_output flag of a segment's last layer, and of layer n, has no
 * effect: its output is stored anyway.
 *
 * Kinds:
 *   none     store everything: zero recompute.
 *   sqrt     round(sqrt(n)) segments of near-equal layer counts (boundaries at
 *            round(j*n/k)), Chen et al.'s sqrt(n) rule; ignores costs and sizes.
 *   optimal  the least recompute with peak <= budget, ties to the lower peak.
 *            When no schedule fits, the plan is the `full` one and feasible=0.
 *   full     the least peak of all 2^(n-1) schedules, ties to less recompute.
 * The DP is exact (no discretisation of bytes or costs; costs are summed in
 * the same order as hfl_ckpt_evaluate, so the figures agree bit for bit). */
#ifndef HFL_MODEL_CHECKPOINT_H
#define HFL_MODEL_CHECKPOINT_H

#include <stddef.h>

#define HFL_CKPT_MAX_LAYERS 64

typedef enum { HFL_CKPT_NONE, HFL_CKPT_SQRT, HFL_CKPT_OPTIMAL, HFL_CKPT_FULL } hfl_ckpt_kind;

/* One layer of the chain: layer i of the text is layers[i-1]. */
typedef struct {
    double cost;      /* forward cost c_i (FLOPs), finite and > 0 */
    size_t out_bytes; /* m_i, bytes of a_i (and of its gradient g_i) */
    int needs_output; /* nonzero: backward of this layer reads a_i too */
} hfl_ckpt_layer;

typedef struct {
    int n;                        /* layers, 1..HFL_CKPT_MAX_LAYERS */
    size_t in_bytes;              /* m_0, bytes of the input batch a_0 */
    const hfl_ckpt_layer *layers; /* [n] */
} hfl_ckpt_chain;

typedef struct {
    hfl_ckpt_kind kind;
    int n;
    unsigned char stored[HFL_CKPT_MAX_LAYERS + 1]; /* [0..n]: 1 = a_i kept; [0] = [n] = 1 */
    int n_segments;
    int bound[HFL_CKPT_MAX_LAYERS + 1]; /* [0..n_segments]: 0 = bound[0] < ... = n; the
                                            stored indices; segment j is (bound[j], bound[j+1]] */
    size_t stored_bytes;  /* sum of m_j over stored j */
    size_t segment_bytes; /* max over segments of W(s,e) */
    int peak_segment;     /* a segment attaining segment_bytes (the lowest index) */
    size_t peak;          /* stored_bytes + segment_bytes */
    double recompute;     /* sum of c_i over internal i */
    double forward;       /* sum of all c_i: one plain forward pass */
    size_t budget;        /* as passed to hfl_ckpt_schedule (SIZE_MAX from evaluate) */
    int feasible;         /* peak <= budget */
    size_t min_peak;      /* least peak of any schedule (from hfl_ckpt_schedule only; 0 otherwise) */
} hfl_ckpt_plan;

/* "none", "sqrt", "optimal", "full" -> kind. -1 with err otherwise. */
int hfl_ckpt_parse(const char *name, hfl_ckpt_kind *kind, char *err);
const char *hfl_ckpt_name(hfl_ckpt_kind kind);

/* Checks a chain: 1 <= n <= HFL_CKPT_MAX_LAYERS, layers non-NULL, every cost
 * finite and > 0, and the byte sums cannot overflow size_t. -1 with err. */
int hfl_ckpt_chain_check(const hfl_ckpt_chain *chain, char *err);

/* Peak and recompute of the schedule `stored` ([0..n]; stored[0] and
 * stored[n] must be nonzero, any nonzero value counts as 1), filled into out.
 * evaluate does not know which kind chose the set: it sets kind =
 * HFL_CKPT_NONE, budget = SIZE_MAX, feasible = 1, min_peak = 0. -1 with err
 * for a bad chain or a set without its ends. */
int hfl_ckpt_evaluate(const hfl_ckpt_chain *chain, const unsigned char *stored,
                      hfl_ckpt_plan *out, char *err);

/* Chooses a schedule of `kind` and fills out (all fields). budget bounds the
 * peak for `optimal` (SIZE_MAX: unbounded); for every kind out->feasible says
 * whether out->peak <= budget and out->min_peak is the least peak any
 * schedule reaches. An infeasible budget is not an error: `optimal` returns 0
 * with the least-peak plan and feasible = 0. -1 with err for a bad chain or
 * kind. Cost: O(n^2) tables plus DPs over exact Pareto frontiers, whose size
 * depends on the chain: for n = 40, typically 0.1-1 ms (bench/ckpt_bench.c);
 * the problem contains 0/1 knapsack, so no polynomial bound is promised. */
int hfl_ckpt_schedule(const hfl_ckpt_chain *chain, hfl_ckpt_kind kind, size_t budget,
                      hfl_ckpt_plan *out, char *err);

#endif
