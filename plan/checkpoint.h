/* checkpoint.h: gradient-checkpointing schedules for a chain of layers.
 *
 * Which activations to keep during forward and which to recompute during
 * backward, under a memory budget (docs/architecture.md, "Gradient checkpointing is a
 * schedule"). The schedule is single-level recomputation as in Chen et al.
 * 2016 ("Training deep nets with sublinear memory cost") and PyTorch's
 * checkpoint_sequential; `optimal` is an exact dynamic program in the spirit
 * of Griewank & Walther's revolve and Beaumont et al.'s rotor (2019, chains of
 * unequal layers), restricted to that single-level setting.
 *
 * THE CHAIN. Layers 1..n. Activation a_0 is the input batch (m_0 bytes);
 * layer i reads a_{i-1} and writes a_i (m_i bytes) at forward cost c_i.
 * The loss reads a_n and writes the loss gradient g_n (m_n bytes). Let f =
 * first_backward (0 counts as 1). Layers f..n run a backward: layer i's
 * backward reads g_i (m_i bytes), a_{i-1} when needs_input_i, a_i when
 * needs_output_i, and, for i > f, writes g_{i-1} (m_{i-1} bytes; into g_i's
 * own buffer when grad_in_place_i, which needs m_{i-1} = m_i). Layers below
 * f run no backward, layer f writes no gradient (f = 1: the input batch
 * gets none). When output_first_i (with needs_output_i), layer i's backward
 * is two sub-steps: the first reads a_i (and g_i), the second writes
 * g_{i-1}, so a_i is gone by then (a stage ending in an in-place ReLU, as
 * plan/planner.h groups layers). needs_output_0 is 0 by definition.
 *
 * A SCHEDULE is the set of stored activations: a_0 and a_n are always stored;
 * any subset of a_1..a_{n-1} may be (2^(n-1) schedules). Stored activations
 * ("checkpoints") split the chain into segments (q, e]: layers q+1..e, with q
 * and e stored and a_{q+1}..a_{e-1} ("internal") not stored.
 *
 * EXECUTION MODEL: every buffer lives from the step that writes it to the
 * last step that reads it, both included, and no longer (what
 * model/trainer.c does with the planner's lifetimes).
 *   Forward: steps 1..n, step i reads a_{i-1} and writes a_i. Then the loss
 *   step reads a_n and writes g_n.
 *   Backward: segments last to first; a segment (q, e] with e >= f is
 *   processed as
 *     recompute steps i = q+1..e-1: read a_{i-1} (a_q or the recomputed
 *       a_{i-1}), write a fresh a_i;
 *     backward steps i = e down to max(q+1, f), as described for the chain;
 *   a segment with e < f is not processed at all.
 *   A stored a_k is therefore read by forward step k+1 (and the loss for
 *   k = n), by the recompute step q+1 of the segment it starts (when that
 *   segment is processed and has internal activations), by backward step
 *   k+1 (needs_input_{k+1}, k+1 >= f) and by backward step k (needs_output_k,
 *   k >= f); an internal a_k written in forward only by forward step k+1;
 *   a recomputed a_k by recompute step k+1 and the same two backward steps.
 *   Parameter gradients, weights and kernel workspace are not activation
 *   memory and are not counted.
 *
 * ACCOUNTING, exact for that model. For a stored a_q starting segment (q, e]:
 *   h_q  = (needs_input_{q+1} and q+1 >= f) or (needs_output_q and q >= f):
 *          a_q is read by a backward step of (q, e] or of the segment below;
 *   nd_q = h_q or (e > q+1 and e >= f): a_q is read at all after forward.
 * For an internal k of (q, e]: h_k = (needs_output_k and k >= f) or
 * (needs_input_{k+1} and k+1 >= f), the recomputed a_k is held after the
 * recompute phase; H(j) = sum of h_k m_k over q < k < j.
 * P(q) = sum of nd_k m_k over the stored k < q (each with its own next stored
 * index): the checkpoints below q still needed; they are live during every
 * step of (q, e], forward or backward, nothing else stored below q is, and
 * no activation or gradient above e is (all their reads are over; a_e and
 * g_e belong to (q, e]).
 * Each step of (q, e] has live bytes P(q) + the figure below:
 *   forward step q+1:        m_q + m_{q+1}
 *   forward step i > q+1:    nd_q m_q + m_{i-1} + m_i
 *   loss (e = n):            nd_q m_q + m_n + m_n
 *   and when e >= f, with T = [needs_output_e] m_e + m_e (a_e held for step
 *   e, and g_e):
 *   recompute step i:        [i = q+1 or h_q] m_q + T + H(i-1)
 *                            + [i > q+1] m_{i-1} + m_i
 *   backward step i:         h_q m_q + H(i) + [needs_output_i] m_i + m_i
 *                            + G_i, G_i = [i > f and not grad_in_place_i]
 *                            m_{i-1}; with output_first_i and
 *                            needs_output_i, the two sub-steps instead
 *                            h_q m_q + H(i) + m_i + m_i and
 *                            h_q m_q + H(i) + m_i + G_i.
 * (In backward step i, m_i + m_i is a_i and g_i: for i = e, a_e is the
 * stored one; for i < e, the recomputed one, held since needs_output_i and
 * i >= f.) X(q, e) is the largest of these figures, and
 *     peak      = max over segments (q, e] of P(q) + X(q, e)
 *     recompute = sum of c_i over internal i of segments with e >= f (each
 *                 recomputed exactly once; a segment that is not processed
 *                 recomputes nothing).
 *
 * SAVED ACTIVATIONS. A layer may also write s_i bytes that nothing but its
 * own backward reads (a transformer block's attention probabilities, layer
 * norm statistics and MLP activations: a_i is then only the block's output).
 * Each forward or recompute step i writes a fresh copy; a copy lives until
 * backward step i reads it (in its sub-step that writes g_{i-1}, the last),
 * or only for the step that wrote it when no
 * backward step i follows (a forward step of an internal layer, whose
 * recomputation makes the copy backward reads, or i < f). So s_i is held from
 * forward step i to backward step i when a_i is stored and i >= f, and from
 * recompute step i to backward step i when a_i is internal and i >= f.
 * With S(a..b) = sum of s_k over f <= k, a <= k <= b, the figures above gain:
 *   every step of (q, e]:    [q >= 1] S(q..q)      (s_q, held for backward q)
 *   forward step i:          s_i
 *   loss:                    s_n
 *   recompute step i:        s_e + S(q+1..i-1) + s_i
 *   backward step i:         S(q+1..i)
 * and nd_q m_q + [q >= 1] S(q..q) is what a_q adds to P above it. With every
 * s_i = 0 (the layers of planner.h's convolutional chains) nothing changes.
 * P(e) = P(q) + nd_q m_q (+ s_q), so a prefix of the schedule fixes P and the peak
 * so far; the DP needs nothing else (checkpoint.c). Unlike the textbook
 * accounting (every checkpoint held to the end of backward, which this file
 * used before), a checkpoint costs memory only until its last read: for the
 * FedAvg cnn that model ranked `full` below `none` while the trainer's real
 * peak was the same under both. tests/plan/test_checkpoint.c states
 * the model a second time as an event simulator and checks the two agree.
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

/* One layer of the chain: layer i of the text is layers[i-1]. The flags are
 * 0 or nonzero. */
typedef struct {
    double cost;       /* forward cost c_i (FLOPs), finite and > 0 */
    size_t out_bytes;  /* m_i, bytes of a_i (and of its gradient g_i) */
    int needs_output;  /* backward of this layer reads a_i */
    int needs_input;   /* backward of this layer reads a_{i-1} */
    int output_first;  /* with needs_output: a_i is read before g_{i-1} is written */
    int grad_in_place; /* g_{i-1} is written over g_i (needs m_{i-1} = m_i) */
    size_t saved_bytes; /* s_i: what only layer i's backward reads (SAVED ACTIVATIONS) */
} hfl_ckpt_layer;

typedef struct {
    int n;                        /* layers, 1..HFL_CKPT_MAX_LAYERS */
    size_t in_bytes;              /* m_0, bytes of the input batch a_0 */
    const hfl_ckpt_layer *layers; /* [n] */
    int first_backward;           /* f: 0 or 1 (all layers run backward) .. n */
} hfl_ckpt_chain;

typedef struct {
    hfl_ckpt_kind kind;
    int n;
    unsigned char stored[HFL_CKPT_MAX_LAYERS + 1]; /* [0..n]: 1 = a_i kept; [0] = [n] = 1 */
    int n_segments;
    int bound[HFL_CKPT_MAX_LAYERS + 1]; /* [0..n_segments]: 0 = bound[0] < ... = n; the
                                            stored indices; segment j is (bound[j], bound[j+1]] */
    size_t stored_bytes;  /* sum of m_j over stored j (not all live at once) */
    int peak_segment;     /* the lowest-index segment (q, e] attaining the peak */
    size_t held_bytes;    /* P(q) of that segment */
    size_t segment_bytes; /* X(q, e) of that segment */
    size_t peak;          /* held_bytes + segment_bytes: max over segments of P + X */
    double recompute;     /* sum of c_i over internal i of processed segments */
    double forward;       /* sum of all c_i: one plain forward pass */
    size_t budget;        /* as passed to hfl_ckpt_schedule (SIZE_MAX from evaluate) */
    int feasible;         /* peak <= budget */
    size_t min_peak;      /* least peak of any schedule (from hfl_ckpt_schedule only; 0 otherwise) */
} hfl_ckpt_plan;

/* "none", "sqrt", "optimal", "full" -> kind. -1 with err otherwise. */
int hfl_ckpt_parse(const char *name, hfl_ckpt_kind *kind, char *err);
const char *hfl_ckpt_name(hfl_ckpt_kind kind);

/* Checks a chain: 1 <= n <= HFL_CKPT_MAX_LAYERS, layers non-NULL, every cost
 * finite and > 0, 0 <= first_backward <= n, grad_in_place only where
 * m_{i-1} = m_i, and the byte sums cannot overflow size_t. -1 with err. */
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
 * kind. Cost: O(n^3) tables plus DPs over exact Pareto frontiers, whose size
 * depends on the chain (bench/ckpt_bench.c times n = 40); the problem
 * contains 0/1 knapsack, so no polynomial bound is promised. */
int hfl_ckpt_schedule(const hfl_ckpt_chain *chain, hfl_ckpt_kind kind, size_t budget,
                      hfl_ckpt_plan *out, char *err);

#endif
