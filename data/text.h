/* text.h: byte-level language-model datasets cut from text files (model/gpt.h's language model;
 * hfl-data text).
 *
 * A file of bytes b_0 .. b_{L-1} gives W = floor((L - 1) / T) windows of
 * T + 1 bytes at stride T: window k has x = b[kT .. kT + T) (token ids, as
 * floats) and y = b[kT + 1 .. kT + T] (the next byte at each position), so a
 * sample carries T labels (hfl_dataset.label_rows = T) over a vocabulary of
 * 256 (n_classes). A byte-level model reads any text, in any language, with
 * no tokenizer to agree on; its loss per label divided by ln 2 is the bits
 * per byte the literature reports for byte-level models. The last H windows
 * of a file are its held-out part, H = round(held_out * W), at least 1 when
 * held_out > 0, so a test set built from every file's tail covers them all
 * without sharing a window with training. */
#ifndef HFL_DATA_TEXT_H
#define HFL_DATA_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "data/idx.h"

#define HFL_TEXT_MAX_CONTEXT 4096

/* Windows of bytes[0, len) into train (the first W - H) and test (the last
 * H; n = 0 and NULL arrays when H = 0). -1 with err when T is outside [1,
 * HFL_TEXT_MAX_CONTEXT], held_out outside [0, 0.5], or the text leaves no
 * training window. */
int hfl_text_windows(const uint8_t *bytes, size_t len, int T, double held_out, hfl_dataset *train,
                     hfl_dataset *test, char *err);

#endif
