/* layers.c: the registry of layer kinds (kind and JSON name -> ops table)
 * and the window geometry shared by conv2d and maxpool2d. Each kind's table
 * lives in its own file: dense.c, relu.c, conv.c, pool.c, lm_layers.c (the
 * language model's three). */
#include <string.h>

#include "model/layers.h"
#include "util/util.h"

static const hfl_layer_ops *const layer_tables[] = {
    [HFL_LAYER_DENSE] = &hfl_dense_ops,
    [HFL_LAYER_RELU] = &hfl_relu_ops,
    [HFL_LAYER_CONV2D] = &hfl_conv2d_ops,
    [HFL_LAYER_MAXPOOL2D] = &hfl_maxpool2d_ops,
    [HFL_LAYER_EMBED] = &hfl_embed_ops,
    [HFL_LAYER_GPT_BLOCK] = &hfl_gpt_block_ops,
    [HFL_LAYER_LM_HEAD] = &hfl_lm_head_ops,
};

#define N_TABLES (int)(sizeof layer_tables / sizeof layer_tables[0])

const hfl_layer_ops *hfl_layer_ops_for(hfl_layer_kind kind) {
    if ((int)kind < 0 || (int)kind >= N_TABLES) return NULL;
    return layer_tables[kind];
}

const hfl_layer_ops *hfl_layer_ops_by_name(const char *name) {
    for (int k = 0; name && k < N_TABLES; k++)
        if (layer_tables[k] && strcmp(layer_tables[k]->name, name) == 0) return layer_tables[k];
    return NULL;
}

size_t hfl_layer_no_workspace(const hfl_layer *ly, hfl_precision t, int batch) {
    (void)ly, (void)t, (void)batch;
    return 0;
}

hfl_window_geom hfl_layer_geom(const hfl_layer *ly) {
    return hfl_window_geom_make(ly->in_shape.c, ly->in_shape.h, ly->in_shape.w, ly->kernel,
                                ly->stride, ly->pad);
}

int hfl_layer_window_shape(hfl_layer *ly, int out_c, int max_pad, char *err) {
    const hfl_shape *in = &ly->in_shape;
    if (ly->kernel < 1 || ly->kernel > HFL_MODEL_MAX_KERNEL)
        return hfl_errf(err, "kernel %d outside [1, %d]", ly->kernel, HFL_MODEL_MAX_KERNEL);
    if (ly->stride < 1 || ly->stride > HFL_MODEL_MAX_KERNEL)
        return hfl_errf(err, "stride %d outside [1, %d]", ly->stride, HFL_MODEL_MAX_KERNEL);
    if (ly->pad < 0 || ly->pad > max_pad)
        return hfl_errf(err, "pad %d outside [0, %d]", ly->pad, max_pad);
    hfl_window_geom g = hfl_layer_geom(ly);
    if (g.ho < 1 || g.wo < 1)
        return hfl_errf(err, "a %dx%d window does not fit the %dx%d input padded by %d", ly->kernel,
                        ly->kernel, in->h, in->w, ly->pad);
    ly->out_shape = (hfl_shape){out_c, g.ho, g.wo};
    return 0;
}
