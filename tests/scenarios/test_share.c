/* test_share.c: hfl-sim's split of a GPU among its clients
 * (scenarios/share.h), against a brute-force count.
 *
 * 1. The budget is the share (free less reserved, over clients + 1) less
 *    the per-process cost, worked out by hand on a 24 GiB card: 40 clients
 *    at 400 MiB each do not fit (the failure), 20 do.
 * 2. For a grid of free memory, costs, needs, reservations and fleet sizes,
 *    the fleet fits exactly when the largest k with (free - reserved) /
 *    (k + 1) >= cost + need, found by counting up, is at least the fleet;
 *    the refusal names that k, in one line.
 * 3. Without a per-process cost subtracted the budgets would add up past
 *    the card: the budgets plus the costs of every process never exceed
 *    the free memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scenarios/share.h"
#include "tests/check.h"
#include "util/util.h"

#define MIB (1ull << 20)

/* The most clients that fit beside the coordinator, by counting up: k + 1
 * clients fit when avail / (k + 2) >= per. */
static int count_fit(uint64_t avail, uint64_t per) {
    int k = 0;
    while (avail / (uint64_t)(k + 2) >= per) k++;
    return k;
}

static void test_by_hand(void) {
    char err[HFL_ERR_LEN] = "";
    uint64_t budget = 0;
    int fit = -1;
    hfl_gpu_share_in in = {.free_bytes = 24576 * MIB, .clients = 20, .cost = 400 * MIB, .need = 100 * MIB};
    CHECK(hfl_gpu_share(&in, &budget, &fit, err) == 0);
    CHECK_MSG(budget == 24576 * MIB / 21 - 400 * MIB, "budget %llu", (unsigned long long)budget);
    in.clients = 40; /* 24576 / 41 = 599 MiB a share: 400 of it the context, 199 left for 100 */
    CHECK(hfl_gpu_share(&in, &budget, &fit, err) == 0 && budget == 24576 * MIB / 41 - 400 * MIB);
    in.need = 300 * MIB; /* 700 MiB each: 24576 / 700 = 35.1, so 34 beside the coordinator */
    CHECK(hfl_gpu_share(&in, &budget, &fit, err) == -1 && fit == 34);
    printf("refusal: %s\n", err);
    CHECK(strstr(err, "40 GPU clients do not fit") && strstr(err, "fits 34 beside the coordinator") &&
          !strchr(err, '\n'));
    in.reserved = 4096 * MIB; /* 20480 / 700 = 29.3: 28 */
    CHECK(hfl_gpu_share(&in, &budget, &fit, err) == -1 && fit == 28 && strstr(err, "own budget"));
    in.reserved = 30000 * MIB; /* more promised than free */
    CHECK(hfl_gpu_share(&in, &budget, &fit, err) == -1 && fit == 0);
}

static void test_grid(void) {
    static const uint64_t frees[] = {0, 500 * MIB, 8192 * MIB, 24576 * MIB, 81920 * MIB + 12345};
    static const uint64_t costs[] = {0, 300 * MIB, 520 * MIB + 4097};
    static const uint64_t needs[] = {3 * MIB + 7, 20 * MIB, 700 * MIB};
    static const uint64_t reserves[] = {0, 1000 * MIB};
    static const int fleets[] = {1, 2, 7, 40, 200};
    int cases = 0;
    for (size_t a = 0; a < sizeof frees / sizeof *frees; a++)
        for (size_t b = 0; b < sizeof costs / sizeof *costs; b++)
            for (size_t c = 0; c < sizeof needs / sizeof *needs; c++)
                for (size_t r = 0; r < sizeof reserves / sizeof *reserves; r++)
                    for (size_t f = 0; f < sizeof fleets / sizeof *fleets; f++) {
                        hfl_gpu_share_in in = {.free_bytes = frees[a], .clients = fleets[f], .reserved = reserves[r],
                                               .cost = costs[b], .need = needs[c]};
                        uint64_t avail = frees[a] > reserves[r] ? frees[a] - reserves[r] : 0;
                        int want = count_fit(avail, costs[b] + needs[c]);
                        uint64_t budget = 0;
                        int fit = -1;
                        char err[HFL_ERR_LEN] = "";
                        int rc = hfl_gpu_share(&in, &budget, &fit, err);
                        CHECK_MSG(fit == want, "free %llu cost %llu need %llu: fit %d, counted %d",
                                  (unsigned long long)frees[a], (unsigned long long)costs[b],
                                  (unsigned long long)needs[c], fit, want);
                        CHECK_MSG((rc == 0) == (fleets[f] <= want), "%d clients, %d fit: rc %d", fleets[f], want, rc);
                        if (rc == 0) {
                            CHECK(budget >= needs[c]);
                            /* every process's cost and budget, and the coordinator's share, within the card */
                            CHECK((budget + costs[b]) * (uint64_t)(fleets[f] + 1) <= avail);
                        } else {
                            char want_text[64];
                            snprintf(want_text, sizeof want_text, "fits %d beside", want);
                            CHECK_MSG(strstr(err, want_text) != NULL, "%s", err);
                        }
                        cases++;
                    }
    printf("share grid: %d cases\n", cases);
}

static const check_case cases[] = {
    {"by_hand", test_by_hand},
    {"grid", test_grid},
};

int main(int argc, char **argv) {
    return check_run("test_share", cases, CHECK_CASES(cases), argc, argv);
}
