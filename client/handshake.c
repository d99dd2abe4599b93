/* handshake.c: hello, welcome, and the plan a client makes between them.
 *
 * A client says hello with its device, learns the model, its codec, the run's
 * batch and the fleet's overhead estimate from the welcome, chooses the
 * training configuration that fits its memory budget (plan/choose.h), and
 * says hello again with that plan, so the coordinator knows what every client
 * runs before any round. The welcome also names the global model's version
 * and SHA-256, so a client that already holds those weights says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "util/util.h"

/* The hello's fields (proto/messages.h): our name (taken on trust only
 * without certificates), samples, codec, device and, once chosen, plan. */
static cJSON *hello_meta(const client_options *o, const hfl_device_info *dev, const client_state *s,
                         const cJSON *plan) {
    cJSON *d = cJSON_CreateObject();
    hfl_hello_msg *h = hfl_malloc(sizeof *h);
    memset(h, 0, sizeof *h);
    snprintf(h->name, sizeof h->name, "%s", o->name);
    h->has_name = 1;
    h->samples = s->claimed ? s->claimed : s->data.n;
    snprintf(h->codec, sizeof h->codec, "%s", o->codec);
    h->has_codec = o->codec[0] != 0;
    h->device = d, h->has_device = 1;
    h->plan = plan, h->has_plan = plan != NULL;
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
    cJSON *meta = hfl_wire_encode(&hfl_wire_hello, h);
    cJSON_Delete(d);
    free(h);
    return meta;
}

/* What the client keeps of a welcome; the settings an older coordinator
 * leaves out take their safe values. */
static int welcome_read(const hfl_welcome_msg *m, client_welcome *w, client_state *s, char *err) {
    snprintf(w->model, sizeof w->model, "%s", m->model);
    snprintf(w->codec, sizeof w->codec, "%s", m->codec);
    snprintf(s->token, sizeof s->token, "%s", m->token);
    w->batch = m->batch;
    w->momentum = m->has_momentum ? m->momentum : 0.9; /* absent: plan the buffer, to be safe */
    w->prox_mu = m->has_prox_mu ? m->prox_mu : 0;      /* FedProx's mu: the anchor only when non-zero */
    w->optimizer = HFL_OPTIM_SGD;                      /* absent: the coordinator predates AdamW */
    if (m->has_optimizer && hfl_optimizer_parse(m->optimizer, &w->optimizer, err) != 0) return -1;
    char *text = cJSON_PrintUnformatted(m->model_spec);
    w->spec_json[0] = 0;
    if (text && strlen(text) < sizeof w->spec_json) memcpy(w->spec_json, text, strlen(text) + 1);
    free(text);
    w->seed = m->has_seed ? m->seed : 1;
    w->model_version = m->has_model_version && m->has_model_sha256 ? m->model_version : -1;
    snprintf(w->model_sha256, sizeof w->model_sha256, "%s", w->model_version >= 0 ? m->model_sha256 : "");
    w->overhead_estimate = m->has_overhead_estimate ? m->overhead_estimate : -1;
    w->chunk_bytes = m->has_chunk_bytes ? m->chunk_bytes : 0;
    s->client_id = (int)m->client_id;
    snprintf(s->instance, sizeof s->instance, "%s", m->instance);
    return 0;
}

/* Says hello (with our plan, once we have one) and reads the welcome: our id
 * and token, the model, our codec, the run's batch and the fleet's overhead
 * estimate for our device. Saying hello again is safe: our identity keeps
 * the id. With a certificate the hello is proven (proto/hello.h). */
int client_say_hello(client_session *ss, char *err) {
    client_state *s = ss->s;
    hfl_msg rep;
    nng_msg *raw;
    if (client_session_redial(ss, err) != 0) return -1;
    cJSON *meta = hello_meta(ss->o, ss->dev, s, ss->plan);
    int sent = hfl_hello(ss->sock, &s->auth, meta, ss->max_payload, &rep, &raw, err);
    cJSON_Delete(meta);
    if (sent == -1) ss->lost = 1; /* the exchange itself failed (hfl_hello) */
    if (sent != 0) return sent;
    int rc = -2;
    s->retry_ms = 0;
    hfl_welcome_msg wm = {0};
    if (rep.type != HFL_MSG_WELCOME) {
        hfl_error_msg e = client_reply_error(&rep, "unexpected reply");
        /* "say hello again" (a challenge gone, a rate limit, a full registry) is worth retrying */
        if (e.reauth) s->retry_ms = (int)e.retry_ms;
        hfl_errf(err, "coordinator %s hello: %s", e.reauth ? "asked us to say again" : "refused", e.error);
        rc = e.reauth ? -1 : -2;
    } else if (hfl_wire_decode(&hfl_wire_welcome, rep.meta, &wm, err) == 0 && welcome_read(&wm, &ss->w, s, err) == 0) {
        rc = 0;
    }
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return rc;
}

cJSON *client_request_meta(const client_state *s, const hfl_wire_msg *d, const void *body) {
    hfl_session_msg session = {.client_id = s->client_id};
    snprintf(session.token, sizeof session.token, "%s", s->token);
    cJSON *meta = hfl_wire_encode(d, body);
    if (meta && hfl_wire_encode_into(&hfl_wire_session, &session, meta) != 0) {
        cJSON_Delete(meta);
        return NULL;
    }
    return meta;
}

hfl_error_msg client_reply_error(const hfl_msg *m, const char *fallback) {
    hfl_error_msg e = {0};
    if (m->type != HFL_MSG_ERROR || hfl_wire_decode(&hfl_wire_error, m->meta, &e, NULL) != 0) {
        memset(&e, 0, sizeof e);
        snprintf(e.error, sizeof e.error, "%s", fallback);
    }
    return e;
}

int client_precisions(const client_options *o, const hfl_device_info *dev, unsigned *out, char *err) {
    *out = o->precisions & hfl_chooser_device_precisions(dev->is_gpu, dev->cc_major, dev->cc_minor);
    if (*out) return 0;
    return hfl_errf(err, "--precision: not on %s (cc %d.%d): fp32 runs everywhere, fp16 from cc 7.5, bf16 from 8.0",
                    dev->name, dev->cc_major, dev->cc_minor);
}

/* Chooses this client's training configuration for the run's batch under its
 * memory budget, verified by measurement before it is trusted
 * (hfl_plan_choose, plan/choose.h), keeps its plan and budget in s, and
 * returns the plan as JSON for the coordinator. */
cJSON *client_choose_plan(const client_options *o, const hfl_device_info *dev, client_state *s,
                          const client_welcome *w, char *err) {
    hfl_plan_request rq = {.spec = &s->spec, .be = s->be, .device = dev->name, .state_dir = o->state_dir,
                           .opt_state = (w->momentum != 0 ? HFL_OPT_MOMENTUM : 0) |
                                        (w->prox_mu != 0 ? HFL_OPT_ANCHOR : 0) |
                                        (w->optimizer == HFL_OPTIM_ADAMW ? HFL_OPT_ADAMW : 0),
                           .max_batch = (int)w->batch, .prefer_batch = (int)w->batch,
                           .allow_smaller = o->allow_smaller, .conv_chunk = o->conv_chunk, .fleet_overhead = (double)w->overhead_estimate,
                           .data_rows = s->data.n, .verify = 1, .who = o->quiet ? NULL : o->name};
    hfl_mem_budget_init(&rq.budget, o->budget, dev->free_bytes, o->headroom);
    s->budget = rq.budget;
    if (client_precisions(o, dev, &rq.precisions, err) != 0) return NULL;
    hfl_plan_choice *ch = hfl_malloc(sizeof *ch);
    int rc = hfl_plan_choose(&rq, ch, err);
    s->cost = ch->cost;
    if (rc == 0) {
        s->plan = ch->plan;
        s->chosen = ch->chosen;
        s->budget = ch->budget;
    }
    int n_records = ch->overhead_records, measured = ch->measured;
    free(ch);
    if (rc != 0) return NULL;
    if (!o->quiet && s->chosen.accum > 1)
        printf("%s: plan: batch %d as %d micro-batches of %d (accumulated)\n", o->name, s->chosen.step_batch,
               s->chosen.accum, s->chosen.batch);
    else if (!o->quiet && s->chosen.step_batch < (int)w->batch)
        printf("%s: plan: batch %d of the run's %d does not fit: a smaller batch, learning rate x %.4g\n",
               o->name, s->chosen.batch, (int)w->batch, (double)s->chosen.batch / (double)w->batch);
    char chunk[40] = "";
    if (s->chosen.conv_chunk) snprintf(chunk, sizeof chunk, ", conv chunk %d", s->chosen.conv_chunk);
    if (!o->quiet)
        printf("%s: plan: batch %d, %s, checkpoint %s%s, predicted peak %.2f MiB (arena %.2f + overhead %.2f) of "
               "%.1f MiB\n",
               o->name, s->chosen.batch, hfl_precision_name(s->chosen.precision), hfl_ckpt_name(s->chosen.ckpt), chunk,
               s->chosen.predicted / 1048576.0,
               s->chosen.arena / 1048576.0, (s->chosen.predicted - s->chosen.arena) / 1048576.0,
               s->budget.planned / 1048576.0);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "backend", s->be->name);
    cJSON_AddStringToObject(p, "device", dev->name);
    cJSON_AddNumberToObject(p, "batch", s->chosen.batch);
    cJSON_AddNumberToObject(p, "accumulation_steps", s->chosen.accum);
    cJSON_AddNumberToObject(p, "step_batch", s->chosen.step_batch);
    cJSON_AddBoolToObject(p, "momentum", (rq.opt_state & HFL_OPT_MOMENTUM) != 0);
    cJSON_AddBoolToObject(p, "prox_anchor", (rq.opt_state & HFL_OPT_ANCHOR) != 0);
    cJSON_AddBoolToObject(p, "adamw", (rq.opt_state & HFL_OPT_ADAMW) != 0);
    cJSON_AddStringToObject(p, "precision", hfl_precision_name(s->chosen.precision));
    cJSON_AddStringToObject(p, "checkpoint", hfl_ckpt_name(s->chosen.ckpt));
    if (s->chosen.conv_chunk) cJSON_AddNumberToObject(p, "conv_chunk", s->chosen.conv_chunk);
    cJSON_AddNumberToObject(p, "budget_bytes", (double)s->budget.planned);
    cJSON_AddNumberToObject(p, "arena_bytes", (double)s->chosen.arena);
    cJSON_AddNumberToObject(p, "predicted_peak_bytes", (double)s->chosen.predicted);
    cJSON_AddNumberToObject(p, "predicted_samples_per_s", s->chosen.samples_per_s);
    /* what capacity-aware work sizes this client's rounds by (hfl-sim: its profile's) */
    cJSON_AddNumberToObject(p, "capacity_samples_per_s", o->speed > 0 ? o->speed : s->chosen.samples_per_s);
    cJSON_AddNumberToObject(p, "overhead_bytes", (double)(s->chosen.predicted - s->chosen.arena));
    cJSON_AddNumberToObject(p, "overhead_records", n_records);
    cJSON_AddNumberToObject(p, "verify_measurements", measured);
    hfl_device_memory_json(p, s->be, &s->cost);
    if (!o->quiet) hfl_device_memory_say(o->name, s->be, &s->cost);
    return p;
}

int client_adopt_model(client_state *s, const client_welcome *w, int new_instance) {
    if (!s->global) return 0;
    char hex[65];
    hfl_sha256_hex(s->global, s->spec.n_params * sizeof(float), hex);
    if (w->model_version >= 0 && !strcmp(hex, w->model_sha256)) {
        s->held_version = (int)w->model_version;
        return 1;
    }
    if (new_instance) s->held_version = -1;
    return 0;
}
