/* optimizer.c: the local optimizers' names (model/model.h, OPTIMIZERS).
 * What each runs is in model/trainer.c; what each plans in plan/planner.h. */
#include <string.h>

#include "model/model.h"
#include "util/util.h"

int hfl_optimizer_parse(const char *name, hfl_optimizer *opt, char *err) {
    if (strcmp(name, "sgd") == 0) *opt = HFL_OPTIM_SGD;
    else if (strcmp(name, "adamw") == 0) *opt = HFL_OPTIM_ADAMW;
    else return hfl_errf(err, "unknown optimizer '%s' (sgd, adamw)", name);
    return 0;
}

const char *hfl_optimizer_name(hfl_optimizer opt) { return opt == HFL_OPTIM_ADAMW ? "adamw" : "sgd"; }
