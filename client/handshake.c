/* handshake.c: hello, welcome, and the plan a client makes between them.
 *
 * A client says hello with its device, learns the model, its codec, the run's
 * batch and the fleet's overhead estimate from the welcome, chooses the
 * training configuration that fits its memory budget (plan/chooser.c), and
 * says hello again with that plan, so the coordinator knows what every client
 * runs before any round. The welcome also names the global model's version
 * and SHA-256, so a client that already holds those weights says so. */
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/budget.h"
#include "client/client.h"
#include "util/util.h"

static cJSON *hello_meta(const client_options *o, const hfl_device_info *dev, const client_state *s) {
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "name", o->name);
    cJSON_AddNumberToObject(meta, "samples", (double)(s->claimed ? s->claimed : s->data.n));
    if (o->codec[0]) cJSON_AddStringToObject(meta, "codec", o->codec);
    cJSON *d = cJSON_AddObjectToObject(meta, "device");
    cJSON_AddStringToObject(d, "kind", dev->is_gpu ? "cuda" : "cpu");
    cJSON_AddStringToObject(d, "backend", s->be->name);
    cJSON_AddStringToObject(d, "name", dev->name);
    if (dev->is_gpu) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", dev->cc_major, dev->cc_minor);
        cJSON_AddStringToObject(d, "compute_capability", cc);
    }
    cJSON_AddNumberToObject(d, "cores", dev->cores);
    cJSON_AddNumberToObject(d, "free_bytes", (double)dev->free_bytes);
    cJSON_AddNumberToObject(d, "total_bytes", (double)dev->total_bytes);
    return meta;
}

/* Says hello (with our plan, once we have one) and reads the welcome: our id
 * and token, the model, our codec, the run's batch and the fleet's overhead
 * estimate for our device. Saying hello again is safe: our identity keeps
 * the id. With a certificate the hello is proven (proto/hello.h). */
int client_say_hello(nng_socket sock, const client_options *o, const hfl_device_info *dev, client_state *s,
                     const cJSON *plan, size_t max_payload, client_welcome *w, char *err) {
    hfl_msg rep;
    nng_msg *raw;
    cJSON *meta = hello_meta(o, dev, s);
    if (plan) cJSON_AddItemToObject(meta, "plan", cJSON_Duplicate(plan, 1));
    int sent = hfl_hello(sock, &s->auth, meta, max_payload, &rep, &raw, err);
    cJSON_Delete(meta);
    if (sent != 0) return sent;
    int64_t id, retry_ms = 0;
    int rc = -2;
    s->retry_ms = 0;
    if (rep.type != HFL_MSG_WELCOME) {
        char why[200] = "unexpected reply";
        hfl_meta_str(rep.meta, "error", sizeof why - 1, why, NULL);
        /* "say hello again" (a challenge gone, a rate limit, a full registry) is worth retrying */
        int again = rep.type == HFL_MSG_ERROR && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep.meta, "reauth"));
        if (again && cJSON_GetObjectItemCaseSensitive(rep.meta, "retry_ms") &&
            hfl_meta_int(rep.meta, "retry_ms", 1, 60000, &retry_ms, NULL) == 0)
            s->retry_ms = (int)retry_ms;
        hfl_errf(err, "coordinator %s hello: %s", again ? "asked us to say again" : "refused", why);
        rc = again ? -1 : -2;
    } else if (hfl_meta_int(rep.meta, "client_id", 0, 1 << 20, &id, err) == 0 &&
               hfl_meta_str(rep.meta, "model", sizeof w->model - 1, w->model, err) == 0 &&
               hfl_meta_str(rep.meta, "codec", sizeof w->codec - 1, w->codec, err) == 0 &&
               hfl_meta_str(rep.meta, "token", sizeof s->token - 1, s->token, err) == 0 &&
               hfl_meta_int(rep.meta, "batch", 1, 65536, &w->batch, err) == 0) {
        w->overhead_estimate = -1;
        w->momentum = 0.9; /* a welcome without it: plan the buffer, to be safe */
        w->prox_mu = 0; /* FedProx's mu: the anchor is planned only when non-zero */
        w->optimizer = HFL_OPTIM_SGD; /* a welcome without it: the coordinator predates AdamW */
        char opt[16] = "sgd";
        if ((cJSON_GetObjectItemCaseSensitive(rep.meta, "optimizer") &&
             (hfl_meta_str(rep.meta, "optimizer", sizeof opt - 1, opt, err) != 0 ||
              hfl_optimizer_parse(opt, &w->optimizer, err) != 0)) ||
            (cJSON_GetObjectItemCaseSensitive(rep.meta, "momentum") &&
             hfl_meta_num(rep.meta, "momentum", 0, 1, &w->momentum, err) != 0) ||
            (cJSON_GetObjectItemCaseSensitive(rep.meta, "prox_mu") &&
             hfl_meta_num(rep.meta, "prox_mu", 0, 1000, &w->prox_mu, err) != 0)) {
            hfl_msg_free(&rep);
            nng_msg_free(raw);
            return -2;
        }
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(rep.meta, "model_spec");
        char *text = cJSON_IsObject(spec) ? cJSON_PrintUnformatted(spec) : NULL;
        w->spec_json[0] = 0;
        if (text && strlen(text) < sizeof w->spec_json) memcpy(w->spec_json, text, strlen(text) + 1);
        free(text);
        if (hfl_meta_int(rep.meta, "seed", 0, INT64_MAX, &w->seed, NULL) != 0) w->seed = 1;
        if (hfl_meta_int(rep.meta, "model_version", 0, INT32_MAX, &w->model_version, NULL) != 0 ||
            hfl_meta_str(rep.meta, "model_sha256", sizeof w->model_sha256 - 1, w->model_sha256, NULL) != 0)
            w->model_version = -1, w->model_sha256[0] = 0;
        if (cJSON_GetObjectItemCaseSensitive(rep.meta, "overhead_estimate") &&
            hfl_meta_int(rep.meta, "overhead_estimate", 0, INT64_C(1) << 50, &w->overhead_estimate, err) != 0)
            w->overhead_estimate = -1;
        s->client_id = (int)id;
        if (hfl_meta_str(rep.meta, "instance", sizeof s->instance - 1, s->instance, NULL) != 0) s->instance[0] = 0;
        rc = 0;
    }
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return rc;
}

int client_precisions(const client_options *o, const hfl_device_info *dev, unsigned *out, char *err) {
    *out = o->precisions & hfl_chooser_device_precisions(dev->is_gpu, dev->cc_major, dev->cc_minor);
    if (*out) return 0;
    return hfl_errf(err, "--precision: not on %s (cc %d.%d): fp32 runs everywhere, fp16 from cc 7.5, bf16 from 8.0",
                    dev->name, dev->cc_major, dev->cc_minor);
}

/* Chooses this client's training configuration for the run's batch under its
 * memory budget (plan/chooser.c), verifies it, plans it into s->plan, and
 * returns the plan as JSON for the coordinator.
 *
 * Nothing is trusted unmeasured: a chosen configuration this state directory
 * has no measurement of is measured first (client/verify.c: one forked step
 * on the CPU, cudaMemGetInfo growth on a GPU) and recorded; the chooser then
 * runs again, now with that measurement (and the model refitted on it; both
 * kept in memory, and in the state directory when there is one), until
 * it picks a configuration measured to fit. On a cold start the model's
 * prior is conservative, so the first pick is small and safe; its
 * measurement teaches the model the real overhead, and the next pick is the
 * best one that fits. When nothing is predicted to fit, the smallest
 * unmeasured candidate whose arena fits is measured (the prior may be what
 * rules it out). Each pass adds one measured configuration, so this ends;
 * CLIENT_VERIFY_MAX bounds it. */
#define CLIENT_VERIFY_MAX 8

/* When nothing is predicted to fit, the unmeasured candidate with the
 * smallest prediction whose arena alone fits, if any, among the precisions
 * whose overhead is not yet fitted on their own class's measurements: a
 * prediction from the prior, the fleet or the other class may be what rules
 * everything out, and measuring it settles that. Once a class has its own
 * measurements its predictions stand, and nothing fitting is a refusal. */
static const hfl_candidate *unmeasured_smallest(const hfl_choice *ch, const client_overhead *ov,
                                                uint64_t usable) {
    const hfl_candidate *best = NULL;
    for (int i = 0; i < ch->n; i++) {
        const hfl_candidate *c = &ch->rows[i];
        uint64_t known;
        if (c->arena > usable || client_overhead_exact(ov, c->precision, c->batch, c->ckpt, &known) ||
            !strcmp(hfl_overhead_source(&ov->model, c->precision), "class"))
            continue;
        if (!best || c->predicted < best->predicted) best = c;
    }
    return best;
}
cJSON *client_choose_plan(const client_options *o, const hfl_device_info *dev, client_state *s,
                          const client_welcome *w,
                          char *err) {
    hfl_chooser_input in = {.be = s->be, .budget = o->budget ? o->budget : dev->free_bytes,
                            .headroom = o->headroom,
                            .opt_state = (w->momentum != 0 ? HFL_OPT_MOMENTUM : 0) |
                                         (w->prox_mu != 0 ? HFL_OPT_ANCHOR : 0) |
                                         (w->optimizer == HFL_OPTIM_ADAMW ? HFL_OPT_ADAMW : 0),
                            .max_batch = (int)w->batch, .prefer_batch = (int)w->batch,
                            .allow_smaller = o->allow_smaller};
    if (client_precisions(o, dev, &in.precisions, err) != 0) return NULL;
    /* first, while the backend holds nothing but what opening it took */
    hfl_device_cost_get(o->state_dir, dev->name, s->be, &s->cost);
    client_overhead *ov = hfl_malloc(sizeof *ov);
    in.overhead = client_overhead_fn;
    in.overhead_ctx = ov;
    client_calibrate(o->state_dir, dev->name, s->be, in.precisions, in.gflops);
    uint64_t usable = (uint64_t)((double)in.budget * (1.0 - in.headroom));
    hfl_choice ch;
    client_probe *probe = NULL;
    int verified = 0, measured = 0;
    client_overhead_load(o->state_dir, dev->name, s->be, &s->spec,
                         (double)w->overhead_estimate, s->cost.known, ov);
    while (!verified) {
        if (hfl_choose(&s->spec, &in, &ch, err) != 0) break;
        const hfl_candidate *c = ch.chosen >= 0 ? &ch.rows[ch.chosen] : unmeasured_smallest(&ch, ov, usable);
        if (!c) {
            hfl_errf(err,
                     "nothing fits in %.2f MiB for model %s: the smallest budget that would is %.2f MiB as "
                     "predicted, at least %.2f MiB for the arena alone",
                     in.budget / 1048576.0, s->spec.name, hfl_mib_up(ch.min_budget),
                     hfl_mib_down(ch.min_arena_budget));
            break;
        }
        uint64_t known;
        if (client_overhead_exact(ov, c->precision, c->batch, c->ckpt, &known)) {
            verified = 1; /* measured before, and the chooser found it fits */
            break;
        }
        if (measured == CLIENT_VERIFY_MAX) {
            hfl_errf(err, "no configuration verified to fit in %.1f MiB after %d measurements",
                     in.budget / 1048576.0, measured);
            break;
        }
        uint64_t peak, process;
        int held;
        if (!probe) probe = client_probe_new(&s->spec, (int)w->batch, s->data.n);
        if (client_probe_measure(probe, s->be, c, in.opt_state, &s->cost, &peak, &held, &process, err) != 0) break;
        measured++;
        if (!o->quiet)
            printf("%s: verify: batch %d %s %s measured %.2f MiB (predicted %.2f) of %.2f MiB usable%s\n",
                   o->name, c->batch, hfl_precision_name(c->precision), hfl_ckpt_name(c->ckpt),
                   peak / 1048576.0, c->predicted / 1048576.0, usable / 1048576.0,
                   peak > usable ? ": too big, re-planning" : "");
        uint64_t staging = hfl_overhead_staging(s->be->host_memory, c->batch, s->spec.in_dim, s->spec.label_rows);
        client_overhead_add(ov, c, staging, peak);
        if (client_overhead_record(o->state_dir, dev->name, s->be, &s->spec, c, staging, peak, process,
                                   held ? &s->cost : NULL, err) != 0)
            break;
    }
    client_probe_free(probe);
    int n_records = ov->model.n;
    free(ov);
    if (!verified) return NULL;
    s->chosen = ch.rows[ch.chosen];
    hfl_plan_config cfg;
    hfl_candidate_config(&s->chosen, in.opt_state, &cfg);
    hfl_plan_config_for_backend(&cfg, s->be);
    s->plan = hfl_malloc(sizeof *s->plan);
    if (hfl_plan_make(&s->spec, &cfg, s->plan, err) != 0) return NULL;
    s->budget = o->budget;
    s->overhead = s->chosen.predicted - s->chosen.arena;
    if (o->budget) hfl_budget_set(o->budget); /* a breach fails loudly */
    if (!o->quiet && s->chosen.accum > 1)
        printf("%s: plan: batch %d as %d micro-batches of %d (accumulated)\n", o->name, s->chosen.step_batch,
               s->chosen.accum, s->chosen.batch);
    else if (!o->quiet && s->chosen.step_batch < (int)w->batch)
        printf("%s: plan: batch %d of the run's %d does not fit: a smaller batch, learning rate x %.4g\n",
               o->name, s->chosen.batch, (int)w->batch, (double)s->chosen.batch / (double)w->batch);
    if (!o->quiet)
        printf("%s: plan: batch %d, %s, checkpoint %s, predicted peak %.2f MiB (arena %.2f + overhead %.2f) of %.1f MiB\n",
               o->name, s->chosen.batch, hfl_precision_name(s->chosen.precision), hfl_ckpt_name(s->chosen.ckpt),
               s->chosen.predicted / 1048576.0,
               s->chosen.arena / 1048576.0, (s->chosen.predicted - s->chosen.arena) / 1048576.0, in.budget / 1048576.0);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "backend", s->be->name);
    cJSON_AddStringToObject(p, "device", dev->name);
    cJSON_AddNumberToObject(p, "batch", s->chosen.batch);
    cJSON_AddNumberToObject(p, "accumulation_steps", s->chosen.accum);
    cJSON_AddNumberToObject(p, "step_batch", s->chosen.step_batch);
    cJSON_AddBoolToObject(p, "momentum", (in.opt_state & HFL_OPT_MOMENTUM) != 0);
    cJSON_AddBoolToObject(p, "prox_anchor", (in.opt_state & HFL_OPT_ANCHOR) != 0);
    cJSON_AddBoolToObject(p, "adamw", (in.opt_state & HFL_OPT_ADAMW) != 0);
    cJSON_AddStringToObject(p, "precision", hfl_precision_name(s->chosen.precision));
    cJSON_AddStringToObject(p, "checkpoint", hfl_ckpt_name(s->chosen.ckpt));
    cJSON_AddNumberToObject(p, "budget_bytes", (double)in.budget);
    cJSON_AddNumberToObject(p, "arena_bytes", (double)s->chosen.arena);
    cJSON_AddNumberToObject(p, "predicted_peak_bytes", (double)s->chosen.predicted);
    cJSON_AddNumberToObject(p, "predicted_samples_per_s", s->chosen.samples_per_s);
    /* what capacity-aware work sizes this client's rounds by (hfl-sim: its profile's) */
    cJSON_AddNumberToObject(p, "capacity_samples_per_s", o->speed > 0 ? o->speed : s->chosen.samples_per_s);
    cJSON_AddNumberToObject(p, "overhead_bytes", (double)s->overhead);
    cJSON_AddNumberToObject(p, "overhead_records", n_records);
    cJSON_AddNumberToObject(p, "verify_measurements", measured);
    client_device_memory_json(p, s->be, &s->cost);
    if (!o->quiet) client_device_memory_say(o->name, s->be, &s->cost);
    return p;
}

int client_adopt_model(client_state *s, const client_welcome *w, int new_instance) {
    if (!s->global) return 0;
    unsigned char d[32];
    char hex[65];
    mbedtls_sha256_ret((const unsigned char *)s->global, s->spec.n_params * sizeof(float), d, 0);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (w->model_version >= 0 && !strcmp(hex, w->model_sha256)) {
        s->held_version = (int)w->model_version;
        return 1;
    }
    if (new_instance) s->held_version = -1;
    return 0;
}
