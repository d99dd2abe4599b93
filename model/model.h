/* model.h: sequential models, their parameters, and one training step.
 *
 * A model is a chain of layers. All parameters live in one contiguous float
 * vector (each dense layer: weight [out, in] row-major, then bias [out]), so
 * the wire format, the codecs and the aggregator see a single tensor.
 * The built-in `mlp` is the FedAvg paper's 2NN (McMahan et al. 2017):
 * 784-200-200-10 with ReLU, softmax cross-entropy, 199,210 parameters.
 *
 * A trainer owns the device buffers for one batch capacity, all sized up
 * front and carved from one allocation (llm.c style). */
#ifndef HFL_MODEL_H
#define HFL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#define HFL_MAX_LAYERS 32

typedef enum { HFL_LAYER_DENSE = 1, HFL_LAYER_RELU = 2 } hfl_layer_kind;

typedef struct {
    hfl_layer_kind kind;
    int in, out;      /* features in and out (relu: in == out) */
    size_t param_off; /* offset of this layer's parameters in the vector (dense only) */
    size_t n_params;  /* dense: out*in + out; relu: 0 */
} hfl_layer;

typedef struct {
    char name[32];
    int n_layers;
    hfl_layer layers[HFL_MAX_LAYERS];
    int in_dim, n_classes;
    size_t n_params;
} hfl_model_spec;

/* Fills spec for a built-in model ("mlp"). Returns -1 with err for an unknown name. */
int hfl_model_builtin(const char *name, hfl_model_spec *spec, char *err);

/* Fills spec with a dense/ReLU chain dims[0]-dims[1]-...-dims[n_dims-1] (ReLU
 * after every dense layer but the last), e.g. {784, 200, 200, 10} is `mlp`.
 * Returns -1 with err when n_dims < 2, a width is < 1 or the chain is too long. */
int hfl_model_spec_mlp(hfl_model_spec *spec, const char *name, const int *dims, int n_dims,
                       char *err);

/* Deterministic initialisation of a host parameter vector (PyTorch's default for
 * nn.Linear: U(-1/sqrt(in), 1/sqrt(in)) for weights and biases), from philox. */
void hfl_model_init_params(const hfl_model_spec *spec, float *params, uint64_t seed);

typedef struct hfl_trainer hfl_trainer;

/* Buffers for batches of up to max_batch samples. */
hfl_trainer *hfl_trainer_create(const hfl_model_spec *spec, const hfl_backend *be, int max_batch);
void hfl_trainer_free(hfl_trainer *t);
size_t hfl_trainer_device_bytes(const hfl_trainer *t); /* what the one allocation took */

void hfl_trainer_set_params(hfl_trainer *t, const float *host_params);
void hfl_trainer_get_params(const hfl_trainer *t, float *host_params);
void hfl_trainer_get_grads(const hfl_trainer *t, float *host_grads);
void hfl_trainer_reset_optimizer(hfl_trainer *t); /* zero momentum */

/* Forward and backward on n <= max_batch host samples (x: n*in_dim floats);
 * leaves d(mean loss)/d(params) in the trainer's gradient buffer. Returns the mean loss. */
float hfl_trainer_forward_backward(hfl_trainer *t, const float *x, const int32_t *y, int n);

/* forward_backward followed by an SGD step; returns the mean loss. */
float hfl_trainer_step(hfl_trainer *t, const float *x, const int32_t *y, int n, float lr,
                       float momentum, float weight_decay);

/* Mean loss and accuracy over n samples, in batches of max_batch. */
float hfl_trainer_evaluate(hfl_trainer *t, const float *x, const int32_t *y, int n, float *accuracy);

#endif
