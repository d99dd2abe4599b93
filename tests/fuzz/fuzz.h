/* fuzz.h: what the libFuzzer harnesses of tests/fuzz/ share.
 *
 * Each harness defines LLVMFuzzerTestOneInput and checks invariants with
 * FUZZ_REQUIRE, which prints one line naming the broken invariant and aborts,
 * so libFuzzer stops and keeps the input as a crash file. Inputs over
 * FUZZ_MAX_INPUT bytes are ignored (every limit a harness relies on fits). */
#ifndef HFL_TEST_FUZZ_H
#define HFL_TEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_MAX_INPUT 65536

#define FUZZ_REQUIRE(cond, ...)                                                     \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
            abort();                                                                \
        }                                                                           \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
