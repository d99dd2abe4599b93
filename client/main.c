/* main.c: hfl-client: pick the backend and device (--device auto|cpu|cuda,
 * kernels/select.h), load this client's share of the data, say hello, then
 * pull tasks, train and send updates until bye. When "auto" falls back to
 * the CPU, the reason is printed once.
 *
 * The coordinator never holds a reply: "wait" means sleep and pull again.
 * With a certificate, the client's name is the certificate's CN and its
 * hello is proven (proto/hello.h). A coordinator that goes away (a lost
 * connection, a timeout) or no longer knows our session (it restarted, or
 * our token expired) is rejoined: hello again with exponential backoff and
 * full jitter, for up to --retry-for seconds, keeping the residual and the
 * last update, which is sent again, not retrained, if the same task comes
 * back. A hello the coordinator asks us to say again (its challenge gone, a
 * rate limit, a full registry: `reauth`) is retried the same way, at start
 * too; only a definite refusal (revoked, another CA, a wrong role, bad
 * fields), or a coordinator that cannot prove its identity, ends the client
 * with a one-line error and exit status 1. A task we were sent already
 * comes back without weights ("sent"): we use the weights we hold, or ask
 * once for a re-download (`resend`).
 *
 * THE SESSION
 *
 * One client_session (client.h) holds the socket, the options, the device,
 * the state, our plan and the last welcome; every step below takes it. Its
 * states, the function performing each, and where each leads:
 *
 *   DIALING    client_session_connect (client/session.c): a req socket dialed
 *              to --coordinator, again with backoff while the error may pass
 *              (a dropped negotiation), for up to --retry-for.
 *              -> HELLO; DONE on a refused connection or certificate.
 *   HELLO      hello_until -> client_say_hello -> hfl_hello: HELLO, the
 *              coordinator's CHALLENGE (with a certificate), HELLO signed,
 *              WELCOME. "Say hello again" and a failed request are retried
 *              with backoff for up to --retry-for.
 *              -> PLANNED; DONE on a definite refusal or when time is up.
 *   PLANNED    check_model, client_choose_plan, hello_until with the plan,
 *              hold_model (the model copies, --init-model, the state file).
 *              -> PULLING; DONE when the model does not fit our data.
 *   PULLING    pull: PULL, a long poll. WAIT or skip_round -> PULLING after
 *              a pause; TASK -> TRAINING (take_task); BYE -> DONE (exit 0);
 *              reauth or a failed request -> REJOINING.
 *   TRAINING   do_task: --dropout's decline -> PULLING; the pending update
 *              when it answers this very task, else client_train_round (under
 *              secure aggregation do_secagg_task: keys, setup and shares
 *              first) -> SENDING. First, a budget that shrank
 *              (--budget-at) re-plans (client/replan.c), or DONE when
 *              nothing fits; a breached budget re-plans and declines the
 *              round -> PULLING, or DONE after repeated breaches.
 *   SENDING    send_update: UPDATE. ACK or a refusal -> PULLING (secure
 *              aggregation: the unmask shares first); reauth or a failed
 *              request -> REJOINING, the update kept.
 *   REJOINING  rejoin -> hello_until, each try bounded by what is left of
 *              --retry-for (at most --timeout). After a failed request the
 *              session is lost: the socket is closed and a fresh one dialed
 *              before the next request (client_session_redial), so recovery
 *              never waits on the old socket's reconnection.
 *              -> PULLING (the pending update waits for its task to come
 *              back); DONE when --retry-for runs out or on a refusal.
 *   DONE       run returns 0 after BYE, else -1 with the one-line error.
 *
 *                                +------------------------------+
 *                                v                              |
 *   DIALING -> HELLO -> PLANNED -> PULLING -> TRAINING -> SENDING
 *                                ^    |                         |
 *                                |    v                         |
 *                                REJOINING <--------------------+
 *
 * A request that fails anywhere (a secure aggregation step, a decline)
 * leaves the session lost; the next request dials afresh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "client/client.h"
#include "proto/secagg.h"
#include "data/files.h"
#include "kernels/blas.h"
#include "model/safetensors.h"
#include "data/partition.h"
#include "kernels/device.h"
#include "kernels/philox.h"
#include "kernels/select.h"
#include "proto/transport.h"
#include "util/util.h"

#define CLIENT_MAX_PAYLOAD ((size_t)256 << 20)
#define CLIENT_HOLD_MS 5000.0 /* how long the coordinator may hold a pull (a long poll) */


/* This client's share of the training set, chosen from the labels alone. */
typedef struct {
    const client_options *o;
    hfl_partition_spec spec;
} share_pick;

static int pick_share(void *ctx, const int32_t *y, int n, int **idx, char *err) {
    const share_pick *p = ctx;
    int32_t *owner = hfl_malloc(sizeof(int32_t) * (size_t)n);
    int k = -1;
    if (hfl_partition_assign(&p->spec, y, n, 10 /* IDX labels are < 10 */, p->o->num_clients, p->o->seed, owner, err) == 0) {
        k = hfl_partition_indices(owner, n, p->o->index, idx);
        if (k <= 0) k = hfl_errf(err, "partition %s gives client %d no samples", p->o->partition, p->o->index);
    }
    free(owner);
    return k;
}

/* Loads this client's data: its own dataset file whole, or its share of the
 * Fashion-MNIST training set: the labels first, then only the images of its
 * share (hfl_fmnist_load_picked), so 100 clients on one machine hold the set
 * once between them, not 100 times. */
static int load_share(const client_options *o, hfl_dataset *share, char *err) {
    if (hfl_data_is_file(o->data_dir)) return hfl_data_load(o->data_dir, share, err);
    share_pick p = {.o = o};
    if (hfl_partition_parse(o->partition, &p.spec, err) != 0) return -1;
    return hfl_fmnist_load_picked(o->data_dir, 1, pick_share, &p, share, err);
}

/* A TASK's settings, range-checked by the wire's table (proto/messages.c),
 * into what training needs. n_update: the update's length (the model's
 * trainable part), which the codec must fit. */
static int read_task(const hfl_task_msg *m, size_t n_update, const char *override, client_task *t, char *err) {
    if (!(t->codec = hfl_codec_find(override[0] ? override : m->codec, err))) return -1;
    if (hfl_codec_check(t->codec, n_update, (uint32_t)m->block, err) != 0) return -1;
    /* capacity-aware work: this many optimizer steps instead of the epochs */
    t->local_steps = m->has_local_steps ? (int)m->local_steps : 0;
    t->lr_schedule = (hfl_lr_schedule){0}, t->lr_step0 = 0; /* absent: the constant lr */
    if (m->has_lr_schedule) {
        if (!m->has_lr_warmup || !m->has_lr_total || !m->has_lr_min || !m->has_lr_step0)
            return hfl_errf(err, "task's lr_schedule comes without lr_warmup, lr_total, lr_min and lr_step0");
        if (strcmp(m->lr_schedule, "cosine") != 0)
            return hfl_errf(err, "task names lr_schedule '%s' (only cosine)", m->lr_schedule);
        if (m->lr_warmup >= m->lr_total || t->local_steps <= 0)
            return hfl_errf(err, "task's lr_schedule: warmup %lld of %lld steps, local_steps %d",
                            (long long)m->lr_warmup, (long long)m->lr_total, t->local_steps);
        t->lr_schedule = (hfl_lr_schedule){1, m->lr_warmup, m->lr_total, m->lr_min};
        t->lr_step0 = m->lr_step0;
    }
    /* absent: SGD; AdamW's betas come with it */
    t->optimizer = HFL_OPTIM_SGD, t->beta1 = HFL_ADAMW_BETA1, t->beta2 = HFL_ADAMW_BETA2;
    if (m->has_optimizer && hfl_optimizer_parse(m->optimizer, &t->optimizer, err) != 0) return -1;
    if (t->optimizer == HFL_OPTIM_ADAMW) {
        if (!m->has_beta1 || !m->has_beta2) return hfl_errf(err, "task names adamw without beta1 and beta2");
        t->beta1 = m->beta1, t->beta2 = m->beta2;
    }
    t->prox_mu = m->has_prox_mu ? m->prox_mu : 0; /* FedProx: absent means plain local SGD */
    t->keep_optimizer = m->has_keep_optimizer && m->keep_optimizer;
    t->deadline_s = m->deadline_ms / 1000;
    t->secagg = 0, t->secagg_bits = 0, t->secagg_shift = 0;
    if (m->has_secagg) { /* secure aggregation (proto/secagg.h): the update goes up as a ring vector */
        const char *mode = m->secagg.mode;
        if (strcmp(mode, "masked") && strcmp(mode, "clear")) return hfl_errf(err, "secagg mode '%s' is not masked or clear", mode);
        t->secagg = !strcmp(mode, "masked") ? SECAGG_MASKED : SECAGG_CLEAR;
        t->secagg_bits = (int)m->secagg.bits, t->secagg_shift = (int)m->secagg.shift;
    }
    t->round = (int)m->round, t->local_epochs = (int)m->local_epochs, t->batch = (int)m->batch;
    t->seed = (uint64_t)m->seed, t->block = (uint32_t)m->block;
    t->lr = m->lr, t->momentum = m->momentum, t->weight_decay = m->weight_decay;
    return 0;
}


/* A rejoin's try: what is left of --retry-for since `since`, at most
 * --timeout, and at least a second (or --timeout where that is less): a
 * proven hello is two round trips and two signatures, milliseconds on an
 * idle link, and a last try cut shorter would fail on a loaded one by
 * construction. */
static int rejoin_limit_ms(const client_options *o, double since) {
    double left = since + o->retry_s - hfl_now(), t = o->timeout_s;
    double floor = t < 1 ? t : 1, limit = left < t ? left : t;
    return (int)((limit > floor ? limit : floor) * 1000);
}

/* HELLO (and REJOINING): says hello (with our plan, once we have one) until
 * the coordinator welcomes us: what may succeed later (a lost connection,
 * "say hello again", a rate limit, after the time it asked for) is retried
 * with backoff until --retry-for has passed since `since`; a definite
 * refusal ends it at once. A try after a failed request dials a fresh socket
 * first (client_say_hello). rejoining: back off before the first try too,
 * and bound each try by what is left of --retry-for. */
static int hello_until(client_session *ss, double since, int rejoining, char *err) {
    const client_options *o = ss->o;
    for (int k = 0;; k++) {
        if (k > 0 || rejoining) {
            if (ss->s->retry_ms > 0) hfl_sleep_ms(ss->s->retry_ms);
            client_backoff_sleep(ss->s, k);
        }
        if (rejoining) client_session_limit(ss, rejoin_limit_ms(o, since));
        int rc = client_say_hello(ss, err);
        if (rc == 0 || rc == -2 || hfl_now() > since + o->retry_s) {
            if (rejoining) client_session_limit(ss, (int)(o->timeout_s * 1000));
            return rc == 0 ? 0 : -1;
        }
        if (!o->quiet) printf("%s: %s; saying hello again\n", o->name, err);
    }
}

/* REJOINING: says hello again (with our plan) until the coordinator takes us
 * back or --retry-for runs out; why: what happened, for the progress line. */
static int rejoin(client_session *ss, const char *why, char *err) {
    const client_options *o = ss->o;
    client_state *s = ss->s;
    char before[sizeof s->instance];
    snprintf(before, sizeof before, "%s", s->instance);
    if (!o->quiet) printf("%s: %s; rejoining\n", o->name, why);
    if (hello_until(ss, hfl_now(), 1, err) != 0) return -1;
    int new_instance = strcmp(before, s->instance) != 0;
    client_adopt_model(s, &ss->w, new_instance);
    if (!o->quiet)
        printf("%s: rejoined as client %d%s\n", o->name, s->client_id, new_instance ? " (a new coordinator instance)" : "");
    return 0;
}

/* 1 when an error reply says our session is unknown or stale (say hello again). */
static int wants_reauth(const hfl_msg *m, char *why, size_t cap) {
    hfl_error_msg e = client_reply_error(m, "session unknown");
    if (!e.reauth) return 0;
    snprintf(why, cap, "%s", e.error);
    return 1;
}

/* SENDING: sends the pending update for its round; 0 when answered
 * (accepted or refused), 1 when we had to rejoin first (the update waits for
 * its task to come back), -1 with err when the coordinator is gone for good. */
static int send_update(client_session *ss, const char *codec, char *err) {
    const client_options *o = ss->o;
    client_state *s = ss->s;
    const client_pending *p = &s->pending;
    hfl_update_msg u = {.round = p->round, .samples = s->claimed, .loss = p->loss,
                        .peak_bytes = (double)client_peak_rss(), .has_peak_bytes = 1,
                        .train_s = p->seconds, .has_train_s = 1,
                        .trained_samples = (double)s->trained, .has_trained_samples = s->trained > 0,
                        /* the rates its steps took, where a schedule moves them */
                        .lr_first = s->lr_first, .has_lr_first = s->lr_last > 0,
                        .lr_last = s->lr_last, .has_lr_last = s->lr_last > 0,
                        .sim_s = p->sim_s, .has_sim_s = p->sim_s > 0,
                        .predicted_peak_bytes = (double)s->chosen.predicted, .has_predicted_peak_bytes = 1,
                        .measured_peak_bytes = (double)s->budget.measured_peak,
                        .has_measured_peak_bytes = s->budget.measured_peak != 0};
    snprintf(u.codec, sizeof u.codec, "%s", codec);
    hfl_msg rep;
    nng_msg *raw;
    char why[HFL_ERR_LEN] = "?";
    /* longer than a chunk: put first, then the update names it (upload.c) */
    int chunked = ss->w.chunk_bytes > 0 && p->len > (size_t)ss->w.chunk_bytes, sent = 0;
    if (chunked) {
        hfl_sha256_hex(p->bytes, p->len, u.payload_sha256);
        u.has_payload_sha256 = 1, u.payload_bytes = (int64_t)p->len, u.has_payload_bytes = 1;
        sent = client_put_update(ss, p, u.payload_sha256, &rep, &raw, why);
    }
    if (sent == 0) {
        cJSON *meta = client_request_meta(s, &hfl_wire_update, &u);
        sent = client_request(ss, HFL_MSG_UPDATE, meta, chunked ? NULL : p->bytes, chunked ? 0 : p->len, &rep, &raw,
                              why);
        cJSON_Delete(meta);
    }
    if (sent < 0) return rejoin(ss, why, err) == 0 ? 1 : -1; /* 1: a put's refusal, in rep, read as the update's */
    int again = wants_reauth(&rep, why, sizeof why);
    if (!again && s->metrics) client_metrics_sent(s, rep.type == HFL_MSG_ACK, p->len, 0);
    hfl_ack_msg ack = {0};
    if (rep.type != HFL_MSG_ACK || hfl_wire_decode(&hfl_wire_ack, rep.meta, &ack, NULL) != 0) ack.missed_deadline = 0;
    if (!again && rep.type == HFL_MSG_ERROR) {
        /* with skip_round the coordinator waits no more for us this round:
         * the next pull brings the next round's task */
        fprintf(stderr, "%s: round %d: %s\n", o->name, p->round, client_reply_error(&rep, why).error);
    } else if (!again && !o->quiet && ack.missed_deadline) {
        printf("%s: round %d: simulated %.2f s, past the round's deadline: left out\n", o->name, p->round, p->sim_s);
    } else if (!again && !o->quiet) {
        printf("%s: round %d  loss %.4f  %.2f s  sent %zu bytes\n", o->name, p->round, p->loss, p->seconds, p->len);
    }
    fflush(stdout);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    if (again) return rejoin(ss, why, err) == 0 ? 1 : -1;
    return 0;
}

/* --dropout: 1 when this client declines round r (philox keyed by the task's
 * seed, our name's stream and the round: the same rounds in every rerun). */
static int declines(const client_options *o, const client_state *s, const client_task *task) {
    if (o->dropout <= 0) return 0;
    uint32_t u = hfl_philox_u32(task->seed, HFL_STREAM_SHUFFLE, (uint32_t)task->round, s->stream, 0, 0xD0D0);
    return u / 4294967296.0 < o->dropout;
}

/* Tells the coordinator we sit this round out (it stops waiting for us and
 * does not hand us its task again); `why` ends the progress line. */
static int send_decline(client_session *ss, int round, const char *why, char *err) {
    hfl_decline_msg d = {.round = round, .declined = 1};
    cJSON *meta = client_request_meta(ss->s, &hfl_wire_decline, &d);
    hfl_msg rep;
    nng_msg *raw;
    int rc = client_request(ss, HFL_MSG_UPDATE, meta, NULL, 0, &rep, &raw, err);
    cJSON_Delete(meta);
    if (rc != 0) return -1;
    if (rep.type != HFL_MSG_ACK)
        rc = hfl_errf(err, "round %d's decline: %s", round, client_reply_error(&rep, "unexpected reply").error);
    else if (!ss->o->quiet)
        printf("%s: round %d declined (%s)\n", ss->o->name, round, why);
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    return rc;
}

/* --pace F: sleeps until F x the task's simulated time (scenarios/profile.h's
 * pricing: download, training at --speed, upload) has passed since it
 * arrived, so a simulated fast device answers before a slow one whatever the
 * host's own speed; the real time spent so far counts toward it. */
static double task_sim_s(const client_options *o, const client_state *s, const client_task *task,
                         size_t update_bytes) {
    if (o->link_up_bps <= 0) return 0; /* no --link: not simulated */
    double speed = o->speed > 0 ? o->speed : s->chosen.samples_per_s;
    return (double)task->task_bytes / o->link_down_bps + o->link_latency_s +
           (speed > 0 ? (double)s->trained / speed : 0) + (double)update_bytes / o->link_up_bps + o->link_latency_s;
}

static void pace(const client_options *o, const client_task *task, double sim) {
    if (o->pace <= 0) return;
    double left = task->received_at + o->pace * sim - hfl_now();
    if (left > 3600) left = 3600; /* a simulated hour at most: a typo'd link must not hang the client */
    if (left > 0) hfl_sleep_ms((int)ceil(left * 1000));
}

/* A breach of the budget in round `round`: re-planned and the round
 * declined (0), or the client has left (-1; client/replan.c). */
static int after_breach(client_session *ss, int round, char *err) {
    if (client_replan_breach(ss, round, err) != 0) return -1;
    char e[HFL_ERR_LEN];
    if (send_decline(ss, round, "re-planned after a memory breach", e) != 0) fprintf(stderr, "%s: %s\n", ss->o->name, e);
    return 0;
}

/* TRAINING under secure aggregation (client/secagg.c): keys and shares,
 * training, the ring vector as the update (SENDING), the unmask shares. A
 * round the coordinator tells us to skip, or whose protocol fails on our
 * side, is left (said on stderr); one that fails on our side before our
 * input went is declined, so the coordinator neither waits for us nor
 * hands us the task again (we would download it and post fresh keys only to
 * be told to skip). Only a coordinator gone for good ends the client. */
static int do_secagg_task(client_session *ss, const client_task *task, const float *weights, int version, char *err) {
    const client_options *o = ss->o;
    client_state *s = ss->s;
    client_pending *p = &s->pending;
    client_secagg *sa = NULL;
    char why[HFL_ERR_LEN] = "", e[HFL_ERR_LEN] = "";
    double t0 = hfl_now(), t_begin = 0, t_pay = 0, t_fin = 0;
    int rc = client_secagg_begin(ss, task, &sa, why, e);
    t_begin = hfl_now() - t0;
    size_t ulen, rlen = 0;
    double loss = 0, secs = 0;
    uint8_t *upd = NULL, *ring = NULL;
    if (rc == 0 && !(upd = client_train_round(s, task, weights, &ulen, &loss, &secs, err))) {
        client_secagg_free(sa);
        return s->budget.breached ? after_breach(ss, task->round, err) : -1;
    }
    if (rc == 0) {
        s->held_version = version;
        ss->breach_replans = 0;
        if (s->metrics) client_metrics_trained(s, loss, secs);
        double t1 = hfl_now();
        rc = client_secagg_payload(ss, sa, task, (const float *)upd, s->spec.n_trainable, &ring, &rlen, why, e);
        t_pay = hfl_now() - t1;
    }
    free(upd);
    int sent = 0, input_sent = 0;
    if (rc == 0) {
        free(p->bytes);
        *p = (client_pending){.round = task->round, .version = version, .loss = loss, .seconds = secs, .bytes = ring,
                              .len = rlen};
        sent = send_update(ss, "ring", err);
        input_sent = sent == 0;
        free(p->bytes);
        *p = (client_pending){0}; /* a masked input is this round's keys' alone: never sent again */
        double t2 = hfl_now();
        if (sent == 0) rc = client_secagg_finish(ss, sa, task, why, e);
        t_fin = hfl_now() - t2;
    }
    if (!o->quiet && rc == 0) /* waits for the other clients included */
        printf("%s: round %d: secure aggregation: keys and shares %.3f s, inbox and masking %.3f s, unmasking %.3f s\n",
               o->name, task->round, t_begin, t_pay, t_fin);
    client_secagg_free(sa);
    if (sent < 0) return -1;
    if (rc == 1) fprintf(stderr, "%s: round %d: %s\n", o->name, task->round, why);
    else if (rc < 0) fprintf(stderr, "%s: round %d: %s\n", o->name, task->round, e);
    if (rc < 0 && !input_sent && send_decline(ss, task->round, "secure aggregation failed on our side", e) != 0)
        fprintf(stderr, "%s: %s\n", o->name, e);
    return 0;
}

/* The first step's measured peak into the overhead log (--state-dir) and
 * the progress line; a first step on a short batch says nothing about the
 * planned one. */
static void record_first_step(client_session *ss) {
    const client_options *o = ss->o;
    client_state *s = ss->s;
    if (s->measured_batch != s->chosen.batch) return;
    char e[HFL_ERR_LEN];
    uint64_t staging = hfl_overhead_staging(s->be->host_memory, s->chosen.batch, s->spec.in_dim, s->spec.label_rows);
    /* first_growth sets process_bytes where the figure is what the process holds */
    if (hfl_overhead_log_record(o->state_dir, ss->dev->name, s->be, &s->spec, &s->chosen, staging,
                                s->budget.measured_peak, s->process_bytes, s->process_bytes ? &s->cost : NULL, e) != 0)
        fprintf(stderr, "%s: %s\n", o->name, e);
    if (!o->quiet)
        printf("%s: first step: measured peak %.2f MiB, predicted %.2f MiB\n", o->name,
               s->budget.measured_peak / 1048576.0, s->chosen.predicted / 1048576.0);
}

/* TRAINING: trains for the task (or takes the pending update when it
 * answers this very task), saves residual and update together, and sends it
 * (SENDING); declines it under --dropout. -1 with err ends the client. */
static int do_task(client_session *ss, const client_task *task, const float *weights, int version, char *err) {
    const client_options *o = ss->o;
    client_state *s = ss->s;
    client_pending *p = &s->pending;
    if (declines(o, s, task)) {
        char e[HFL_ERR_LEN];
        if (send_decline(ss, task->round, "--dropout", e) != 0) fprintf(stderr, "%s: %s\n", o->name, e);
        else if (s->metrics) client_metrics_sent(s, 0, 0, 1);
        return 0;
    }
    if (!task->secagg && p->round == task->round && p->version == version && p->bytes) {
        if (!o->quiet) printf("%s: round %d: sending the update already made for it\n", o->name, task->round);
        return send_update(ss, task->codec->name, err) < 0 ? -1 : 0; /* no training: no re-plan */
    }
    int fit = client_replan_round(ss, task->round, err); /* the budget it has now */
    if (fit == CLIENT_SIT_OUT) {
        char e[HFL_ERR_LEN];
        fprintf(stderr, "%s: %s\n", o->name, err);
        if (send_decline(ss, task->round, "free memory holds no plan now", e) != 0) fprintf(stderr, "%s: %s\n", o->name, e);
        return 0;
    }
    if (fit != 0) return -1;
    if (task->secagg) return do_secagg_task(ss, task, weights, version, err);
    size_t ulen;
    double loss, secs;
    int measured_before = s->budget.measured_peak != 0;
    uint8_t *upd = client_train_round(s, task, weights, &ulen, &loss, &secs, err);
    if (!upd) return s->budget.breached ? after_breach(ss, task->round, err) : -1;
    ss->breach_replans = 0;
    if (s->optimizer_from_round && !o->quiet)
        printf("%s: round %d: the local optimizer went on from round %d's state\n", o->name, task->round,
               s->optimizer_from_round);
    if (!measured_before && s->budget.measured_peak) record_first_step(ss);
    s->held_version = version; /* client_train_round kept the weights as s->global */
    if (s->metrics) client_metrics_trained(s, loss, secs);
    double sim = task_sim_s(o, s, task, ulen);
    pace(o, task, sim);
    free(p->bytes);
    *p = (client_pending){.round = task->round, .version = version, .loss = loss, .seconds = secs, .sim_s = sim,
                          .bytes = upd, .len = ulen};
    if (o->state_dir[0] && client_state_save(o->state_dir, o->name, s->spec.name, task->codec->name, s->residual,
                                             s->spec.n_trainable, p, err) != 0)
        fprintf(stderr, "%s: %s\n", o->name, err);
    hfl_test_crash("client-trained", task->round); /* saved, not yet sent */
    return send_update(ss, task->codec->name, err) < 0 ? -1 : 0;
}

/* A TASK reply (rep and raw, freed here before training) into a task and
 * its weights, then TRAINING. resend: set when the task was sent before and
 * we lack its weights (the next pull asks for them). 0, or -1 with err when
 * the client ends. */
static int take_task(client_session *ss, hfl_msg *rep, nng_msg *raw, int *resend, char *err) {
    client_state *s = ss->s;
    client_task task;
    int version = -1, tw = 0;
    hfl_task_msg tm = {0};
    int bad = hfl_wire_decode(&hfl_wire_task, rep->meta, &tm, err) != 0 ||
              read_task(&tm, s->spec.n_trainable, ss->o->codec, &task, err) != 0;
    task.received_at = hfl_now(), task.task_bytes = nng_msg_len(raw);
    int fetched = !bad && tm.has_payload_bytes; /* the weights come by fetch, decoded as they come */
    if (fetched) {
        int malformed = 0, rc = client_fetch_weights(ss, &tm, &version, &malformed, err);
        bad = malformed;
        if (rc != 0 && !bad) {
            /* the round moved on, a chunk was not what its digest says, or the
             * link would not come back: not this task, then; the next pull
             * asks for it again (or the next round's) */
            fprintf(stderr, "%s: round %d: %s; pulling again\n", ss->o->name, task.round, err);
            hfl_wire_free(&hfl_wire_task, &tm);
            hfl_msg_free(rep);
            nng_msg_free(raw);
            return 0;
        }
        task.task_bytes += (size_t)tm.payload_bytes;
    }
    if (!bad && !fetched) bad = (tw = client_task_weights(rep->payload, rep->payload_len, &tm, s, &version, err)) < 0;
    hfl_wire_free(&hfl_wire_task, &tm);
    hfl_msg_free(rep);
    nng_msg_free(raw);
    if (!bad && tw == 1) { /* sent before, weights lost: once more, with them */
        if (!ss->o->quiet)
            printf("%s: round %d's task was sent before; asking for its weights again\n", ss->o->name, task.round);
        *resend = 1;
        return 0;
    }
    if (!bad && s->metrics) client_metrics_task(s, task.round, task.task_bytes);
    return bad ? -1 : do_task(ss, &task, s->global, version, err); /* weights.c put them there */
}

/* PULLING: one pull and what its reply leads to: 0 to pull again (after
 * WAIT, a skipped round, a rejoin or a task done), 1 after BYE, -1 with err
 * when the client ends. resend: this pull asks for the task we were sent
 * again, with its weights (cleared; take_task sets it). */
static int pull(client_session *ss, int *resend, char *err) {
    const client_options *o = ss->o;
    /* well inside our request timeout, so a held pull never times out */
    double hold_ms = o->timeout_s * 1000 / 4 < CLIENT_HOLD_MS ? o->timeout_s * 1000 / 4 : CLIENT_HOLD_MS;
    hfl_pull_msg pm = {.have_version = ss->s->held_version, .has_have_version = 1,
                       .resend = 1, .has_resend = *resend, /* the task we were sent, again */
                       /* a long poll: the coordinator may hold the pull until there is work */
                       .hold_ms = (int64_t)hold_ms, .has_hold_ms = 1,
                       /* re-planned (client/replan.c): the new plan, until a pull is answered */
                       .plan = ss->plan, .has_plan = ss->plan_round > 0,
                       .plan_round = ss->plan_round, .has_plan_round = ss->plan_round > 0};
    cJSON *meta = client_request_meta(ss->s, &hfl_wire_pull, &pm);
    *resend = 0;
    hfl_msg rep;
    nng_msg *raw;
    char why[HFL_ERR_LEN] = "unexpected reply";
    int sent = client_request(ss, HFL_MSG_PULL, meta, NULL, 0, &rep, &raw, why);
    cJSON_Delete(meta);
    if (sent != 0) return rejoin(ss, why, err);
    ss->plan_round = 0; /* the coordinator has the plan */
    if (rep.type == HFL_MSG_TASK) return take_task(ss, &rep, raw, resend, err);
    int rc = 0;
    hfl_error_msg e = client_reply_error(&rep, why);
    hfl_wait_msg wm = {0};
    if (rep.type == HFL_MSG_WAIT) {
        if (hfl_wire_decode(&hfl_wire_wait, rep.meta, &wm, NULL) != 0) wm.ms = 200;
    } else if (rep.type == HFL_MSG_BYE) {
        if (!o->quiet) printf("%s: run complete, bye\n", o->name);
        rc = 1;
    } else if (e.reauth) {
        rc = 2; /* rejoin, once the reply is freed */
    } else if (e.skip_round) { /* the next round's task comes by itself */
        fprintf(stderr, "%s: %s\n", o->name, e.error);
        wm.ms = 200;
    } else {
        rc = hfl_errf(err, "coordinator answered pull with %s: %s", hfl_msg_type_name(rep.type), e.error);
    }
    hfl_msg_free(&rep);
    nng_msg_free(raw);
    if (rc == 2) return rejoin(ss, e.error, err);
    if (wm.ms > 0) hfl_sleep_ms((int)wm.ms);
    return rc;
}

/* The welcome's model against our data: its inputs, labels, tokens and classes. */
static int check_model(client_session *ss, char *err) {
    client_state *s = ss->s;
    const client_welcome *w = &ss->w;
    if (w->spec_json[0] ? hfl_model_spec_from_json(w->spec_json, strlen(w->spec_json), &s->spec, err) != 0
                        : hfl_model_builtin(w->model, &s->spec, err) != 0)
        return -1;
    if (s->spec.in_dim != s->data.dim)
        return hfl_errf(err, "model %s takes %d features, the data has %d", w->model, s->spec.in_dim, s->data.dim);
    if (s->spec.label_rows != hfl_dataset_label_rows(&s->data))
        return hfl_errf(err, "model %s takes %d label(s) per sample, the data has %d (a language model "
                        "needs hfl-data text's windows)", w->model, s->spec.label_rows,
                        hfl_dataset_label_rows(&s->data));
    if (hfl_model_check_tokens(&s->spec, s->data.x, (size_t)s->data.n * s->data.dim, s->data.pixels, err) != 0)
        return -1;
    if (s->data.n_classes > s->spec.n_classes)
        return hfl_errf(err, "the data has labels up to %d, model %s tells %d classes apart", s->data.n_classes - 1,
                        w->model, s->spec.n_classes);
    return 0;
}

/* The model copies (touched now, so they are resident before the training
 * step's memory is measured: the budget is the step's), --init-model's
 * weights and the state file's residual and pending update. */
static int hold_model(client_session *ss, char *err) {
    const client_options *o = ss->o;
    client_state *s = ss->s;
    const client_welcome *w = &ss->w;
    /* the update and its residual cover the trainable part (LoRA: the adapters) */
    size_t n = s->spec.n_params, nt = s->spec.n_trainable;
    s->global = hfl_malloc(n * sizeof(float));
    s->residual = hfl_malloc(nt * sizeof(float));
    memset(s->global, 0, n * sizeof(float));
    memset(s->residual, 0, nt * sizeof(float));
    if (!o->quiet)
        printf("%s: registered as client %d with %d samples, codec %s\n", o->name, s->client_id, s->data.n, w->codec);
    if (o->init_model[0]) {
        /* as the coordinator starts it: what the file lacks (a base model's
         * file for a LoRA spec has no adapters) keeps the seed's start */
        hfl_model_init_params(&s->spec, s->global, (uint64_t)w->seed);
        if (hfl_safetensors_load(o->init_model, &s->spec, s->global, err) != 0) return -1;
        int held = client_adopt_model(s, w, 0);
        if (!o->quiet && held)
            printf("%s: %s is the global model (version %d): no download for it\n", o->name, o->init_model,
                   s->held_version);
        else if (!o->quiet)
            printf("%s: %s is not the global model (version %lld): the first task brings it\n", o->name,
                   o->init_model, (long long)w->model_version);
    }
    if (o->state_dir[0]) {
        char why[HFL_ERR_LEN];
        int loaded = client_state_load(o->state_dir, o->name, w->model, w->codec, s->residual, s->spec.n_trainable,
                                       &s->pending, why) == 0;
        if (!o->quiet) printf("%s: %s\n", o->name, loaded ? "error-feedback residual restored from the state file" : why);
    }
    return 0;
}

/* DIALING, HELLO and PLANNED, then PULLING until BYE or an error. */
static int run(const client_options *o, client_state *s, const hfl_device_info *dev, char *err) {
    client_session ss = {.o = o, .dev = dev, .s = s, .max_payload = CLIENT_MAX_PAYLOAD};
    int rc = -1, resend = 0;
    /* Plan before allocating anything for training, then say hello again with the plan. */
    if (client_session_connect(&ss, err) == 0 && hello_until(&ss, hfl_now(), 0, err) == 0 &&
        check_model(&ss, err) == 0 && (ss.plan = client_choose_plan(o, dev, s, &ss.w, err)) &&
        hello_until(&ss, hfl_now(), 0, err) == 0 && hold_model(&ss, err) == 0)
        while ((rc = pull(&ss, &resend, err)) == 0) {
        }
    client_session_close(&ss);
    return rc > 0 ? 0 : -1;
}

/* Our certificate is our identity: its CN becomes our name (--name must
 * agree), and the coordinator must prove its own with the CA's help. */
static int load_identity(client_options *o, hfl_hello_auth *auth, char *err) {
    char e[HFL_ERR_LEN];
    if (hfl_identity_load(o->tls.cert_file, &auth->self, e) != 0) return hfl_errf(err, "--cert: %s", e);
    const char *cn = hfl_identity_name(auth->self), *role = hfl_identity_role(auth->self);
    if (strcmp(role, HFL_ROLE_CLIENT) != 0)
        return hfl_errf(err, "--cert: the certificate of '%s' was issued for the %s role, not client", cn, role);
    if (o->name_given && strcmp(o->name, cn) != 0)
        return hfl_errf(err, "--name %s: this client is '%s', its certificate's name", o->name, cn);
    snprintf(o->name, sizeof o->name, "%s", cn);
    if (hfl_trust_load(o->tls.ca_file, NULL, &auth->trust, e) != 0) return hfl_errf(err, "--ca: %s", e);
    auth->server_name = o->tls.server_name;
    return 0;
}

int main(int argc, char **argv) {
    hfl_blas_core_fix(argv); /* before anything else: it may execute this program again */
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress reaches logs and pipes as it happens */
    client_options o = {0};
    char err[HFL_ERR_LEN];
    if (client_options_parse(argc, argv, &o, err) != 0) return hfl_fail("hfl-client", err, 2);
    hfl_blas_set_threads(o.threads);
    if (o.state_dir[0] && hfl_mkdirs(o.state_dir, err) != 0) {
        fprintf(stderr, "hfl-client: --state-dir: %s\n", err);
        return 1;
    }
    hfl_device_info dev;
    char why[HFL_ERR_LEN];
    const hfl_backend *be = hfl_backend_select(o.device, &dev, why, err);
    if (!be) return hfl_fail("hfl-client", err, 1);
    /* Said once; --plan --json says it in the JSON instead (fallback_reason). */
    const char *who = o.plan ? "hfl-client" : o.name;
    int say = !o.quiet && !(o.plan && o.json);
    if (say && why[0])
        printf("%s: training on the CPU: %s\n", who, why);
    else if (say && !dev.is_gpu)
        printf("%s: training on the CPU (%s), as asked\n", who, dev.name);
    else if (say)
        printf("%s: training on %s (cc %d.%d, %.0f MiB free, %s backend)\n", who, dev.name, dev.cc_major,
               dev.cc_minor, dev.free_bytes / 1048576.0, be->name);
    if (o.plan) {
        if ((o.trial ? client_trial_run(&o, be, &dev, err) : client_plan_run(&o, be, &dev, why, err)) != 0)
            return hfl_fail("hfl-client", err, 1);
        return 0;
    }
    client_state s;
    memset(&s, 0, sizeof s);
    if (o.tls.cert_file && o.tls.ca_file && load_identity(&o, &s.auth, err) != 0) return hfl_fail("hfl-client", err, 1);
    s.be = be;
    s.stream = hfl_hash32(o.name);
    s.held_version = -1;
    if (load_share(&o, &s.data, err) != 0) return hfl_fail("hfl-client", err, 1);
    if (o.metrics[0] && client_metrics_start(&o, &s, err) != 0) return hfl_fail("hfl-client", err, 1);
    s.attack_scale = o.attack_scale;
    s.claimed = o.attack_samples > 0 ? o.attack_samples : s.data.n;
    if (o.attack_scale != 0 && !o.quiet)
        printf("%s: attacking: updates x %g, claiming %lld samples\n", o.name, o.attack_scale, (long long)s.claimed);
    int rc = run(&o, &s, &dev, err);
    if (rc != 0) fprintf(stderr, "hfl-client: %s\n", err);
    client_metrics_stop(&s);
    hfl_identity_free(s.auth.self);
    hfl_trust_free(s.auth.trust);
    free(s.pending.bytes);
    return rc == 0 ? 0 : 1;
}
