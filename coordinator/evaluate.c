/* evaluate.c: the global model's evaluation on the test set, off the
 * round's critical path.
 *
 * When a round aggregates, the next round can open at once: its clients need
 * the new weights, not their accuracy. So the closing round hands its entry
 * to this thread and returns; the thread evaluates c->global without the
 * coordinator lock, then fills the round log entry's test_acc and test_loss,
 * publishes the round (event, progress line) and writes the report, the
 * write also outside the lock. Until then no later round closes, so rounds
 * are published in order, and the run is not done before its last round's
 * accuracy is known. That also makes c->global the evaluated weights for
 * the whole evaluation, with no copy (one model's bytes less: 328 MiB at
 * GPT-2 small): only a round's close writes it after start-up (the server
 * step, rounds.c's round_aggregate), and rounds_tick closes no round while
 * eval_busy; everyone else only reads it (the downlink, the state file). The state was saved at the close, before the next round
 * opened; a run continued from a state whose last round was not yet
 * evaluated evaluates the saved weights again (the same bits, the same
 * figures: eval_fill_pending).
 * Without the thread (eval_start not called: the round engine's tests) the
 * evaluation runs inline, as it always did. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "coordinator/coord.h"
#include "util/util.h"

typedef struct coord_eval coord_eval_t;

struct coord_eval {
    pthread_t thread;
    pthread_cond_t cv; /* with c->lock */
    int entry;         /* their round: an index into c->rounds */
    int busy, stop;
};

/* The accuracy and loss of w into the round's record (with c->lock); for a
 * language model also test_bpb, the loss per label (a byte of hfl-data
 * text's windows) in bits: loss / ln 2. */
static void eval_fill(coord *c, round_record *r, float acc, float loss) {
    r->has_test = 1, r->test_acc = acc, r->test_loss = loss;
    r->has_test_bpb = c->spec.layers[c->spec.n_layers - 1].kind == HFL_LAYER_LM_HEAD;
    r->test_bpb = loss / 0.6931471805599453;
    c->final_acc = acc;
}

/* On a device the test set is uploaded once, at the first evaluation, and
 * evaluated from there every round (the same figures as staging it from
 * the host, tests/model/test_resident.c); where the device cannot hold it,
 * one line says so and each round stages it as on the CPU. */
static float eval_model(coord *c, const float *w, float *loss) {
    float acc = 0;
    hfl_trainer_set_params(c->eval, w);
    if (!c->be->host_memory && !c->test_dev_tried) {
        char err[HFL_ERR_LEN];
        c->test_dev_tried = 1;
        if (!(c->test_dev = hfl_trainer_upload_set(c->eval, c->test.x, c->test.y, c->test.n, err)))
            fprintf(stderr, "hfl-coordinator: the test set stays on the host, staged every round: %s\n", err);
    }
    if (c->test_dev) *loss = hfl_trainer_evaluate_resident(c->eval, c->test_dev, &acc);
    else *loss = hfl_trainer_evaluate(c->eval, c->test.x, c->test.y, c->test.n, &acc);
    return acc;
}

static void *eval_main(void *arg) {
    coord *c = arg;
    coord_eval_t *q = c->evq;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!q->busy && !q->stop) pthread_cond_wait(&q->cv, &c->lock);
        if (!q->busy) break;
        pthread_mutex_unlock(&c->lock);
        double t0 = hfl_now();
        /* c->eval and c->test are this thread's while busy; c->global is
         * written by no one until it is done (the header) */
        float loss, acc = eval_model(c, c->global, &loss);
        pthread_mutex_lock(&c->lock);
        hfl_hist_observe(&c->eval_hist, hfl_now() - t0);
        hfl_test_crash("evaluate", (int)c->rounds.v[q->entry].round);
        eval_fill(c, &c->rounds.v[q->entry], acc, loss);
        c->done = c->done_pending; /* so the report says complete */
        char *text = NULL;
        size_t len = 0;
        report_publish_round(c, q->entry, &text, &len);
        pthread_mutex_unlock(&c->lock);
        char err[HFL_ERR_LEN];
        if (text && report_store(c, text, len, err) != 0) fprintf(stderr, "hfl-coordinator: %s\n", err);
        pthread_mutex_lock(&c->lock);
        q->busy = 0;
        pthread_cond_signal(&c->tick); /* a round waiting to close may now */
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int eval_start(coord *c, char *err) {
    coord_eval_t *q = hfl_calloc(1, sizeof *q);
    pthread_cond_init(&q->cv, NULL);
    c->evq = q;
    if (pthread_create(&q->thread, NULL, eval_main, c) != 0) {
        c->evq = NULL;
        pthread_cond_destroy(&q->cv);
        free(q);
        return hfl_errf(err, "cannot start the evaluation thread");
    }
    return 0;
}

void eval_stop(coord *c) {
    coord_eval_t *q = c->evq;
    if (!q) return;
    pthread_mutex_lock(&c->lock);
    q->stop = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&c->lock);
    pthread_join(q->thread, NULL);
    c->evq = NULL;
    pthread_cond_destroy(&q->cv);
    free(q);
}

int eval_busy(coord *c) { return c->evq && c->evq->busy; }

void eval_round(coord *c, int entry) {
    coord_eval_t *q = c->evq;
    if (!q) {
        double t0 = hfl_now();
        float loss, acc = eval_model(c, c->global, &loss);
        hfl_hist_observe(&c->eval_hist, hfl_now() - t0);
        eval_fill(c, &c->rounds.v[entry], acc, loss);
        c->done = c->done_pending;
        report_publish_round(c, entry, NULL, NULL);
        return;
    }
    q->entry = entry;
    q->busy = 1;
    pthread_cond_signal(&q->cv);
}

void eval_fill_pending(coord *c) {
    int last = c->rounds.n - 1;
    if (last < 0 || c->rounds.v[last].has_test) return;
    double t0 = hfl_now();
    float loss, acc = eval_model(c, c->global, &loss);
    hfl_hist_observe(&c->eval_hist, hfl_now() - t0);
    eval_fill(c, &c->rounds.v[last], acc, loss);
    report_publish_round(c, last, NULL, NULL); /* its event and progress line were never written */
}
