/* safetensors.h: a model's parameters in and out as a safetensors file.
 *
 * The container (util/stfile.h) is safetensors' format: a header length,
 * a JSON header naming each tensor's dtype, shape and byte offsets, then
 * the data buffer.
 *
 * hfl writes one F32 tensor pair per parametric layer l of the spec,
 * "layers.<l>.weight" and "layers.<l>.bias", with PyTorch's layouts: dense
 * [out, in] (nn.Linear), conv2d [out, in_channels, k, k] (nn.Conv2d); so a
 * PyTorch module whose nn.ModuleList "layers" holds the spec's layers in
 * order (nn.ReLU and nn.MaxPool2d where hfl has them, flattening before the
 * first dense layer) loads the file with load_state_dict. A language model
 * (model.h, LANGUAGE MODELS) is written by nanoGPT's state_dict names
 * instead: "transformer.wte.weight" [V, C], "transformer.wpe.weight" [T, C],
 * "transformer.h.<b>.ln_1.weight", ".attn.c_attn.weight" [3C, C], ... for
 * block b, "transformer.ln_f.weight" and ".bias" (the output projection is
 * wte, tied). The metadata holds
 * "format": "pt" and "hfl_model": the spec as hfl's JSON model format.
 *
 * The reader validates everything before it writes a weight: the container
 * (hfl_st_parse), then the tensors against the spec (each one present, F32,
 * with its shape, nothing else). Every refusal is one line
 * in err. */
#ifndef HFL_MODEL_SAFETENSORS_H
#define HFL_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* The file's bytes for spec's parameters (n_params floats); NULL with err
 * when out of memory or the spec cannot be written as JSON. */
uint8_t *hfl_safetensors_encode(const hfl_model_spec *spec, const float *params, size_t *len, char *err);

/* Validates buf as a safetensors file of spec's parameters and fills params
 * (n_params floats); -1 with err, params untouched, on any fault. */
int hfl_safetensors_decode(const uint8_t *buf, size_t len, const hfl_model_spec *spec, float *params,
                           char *err);

/* The same on a file, streamed: save writes atomically (temporary file and
 * rename) from params as they lie; load reads only the header whole, checks
 * it as decode does, then reads each tensor straight into params. Neither
 * holds the file in memory (a 344 MB GPT-2-small model costs its header,
 * not a second copy). Errors start with the path; a load that fails after
 * the checks (the file shrank while it was read) may have written some
 * tensors. */
int hfl_safetensors_save(const char *path, const hfl_model_spec *spec, const float *params, char *err);
int hfl_safetensors_load(const char *path, const hfl_model_spec *spec, float *params, char *err);

#endif
