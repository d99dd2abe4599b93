/* test_persist.c: the coordinator's state on disk (coordinator/persist.c),
 * with the round engine driven in-process (rounds_harness.h) over mlp.
 *
 * The fleet: clients a (100 samples) and b (300) answer every round r with
 * updates u(r) and 1.5 u(r) in every weight, u = 0.5, 0.05, -0.4, 0.02 over
 * the 4 rounds, so FedYogi's second moment grows in rounds 1 and 3 and
 * shrinks in 2 and 4. The oracle for a continued run is the uninterrupted
 * run's model: its SHA-256, taken here with mbedTLS over the model's bytes.
 *
 * 1. Round trip: a state saved after two rounds of FedYogi (with a revoked
 *    client, another codec, peaks, a reason for leaving, a rejected count
 *    and a clip set by hand) comes back field for field into a fresh
 *    coordinator: the model and both moments byte for byte, the optimizer's
 *    steps, round, version, clip, registry, round log, final hash; the
 *    restart is counted, the round closed, every token gone. A finished
 *    run's state comes back finished; a one-character state dir works.
 * 2. FedAdam and FedYogi continued to the uninterrupted run's model hash:
 *    stopped after every round and continued; and killed (a child process,
 *    HFL_TEST_CRASH, SIGKILL) at every crash point the state's round trip
 *    passes: the first update (round 2), before aggregating (round 3), the
 *    new state written but not renamed (round 3), and between the two
 *    renames (round 3: no current state, .prev and .new on disk). Each
 *    continuation starts from the round the crash point implies.
 * 3. Fallback: the current state damaged in each way the reader checks
 *    (checksum of JSON or binary, truncated, empty, magic, format, lengths,
 *    JSON that is not an object under a good checksum) or missing, with
 *    .prev kept: the run continues from .prev; without .prev: a one-line
 *    error naming the damage. Both missing: a fresh run.
 * 4. Refusals that do not fall back: a state of another run (each setting
 *    of the fingerprint changed in turn), a binary part that does not fit
 *    the server optimizer, a malformed registry or round log, an unknown
 *    codec; a state dir that cannot be made.
 * 5. The order of the writes (syscall_log.h): the new state written, flushed,
 *    renamed to .new, its directory flushed; the current state renamed to
 *    .prev, .new renamed into place, and the directory flushed again; no
 *    file at all without --state-dir. */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mbedtls/sha256.h>

#include "tests/coordinator/rounds_harness.h"
#include "tests/coordinator/syscall_log.h"

#define ROUNDS 4

static char dir[512];

static void sha_hex(char hex[65]) {
    unsigned char d[32];
    mbedtls_sha256_ret((const unsigned char *)c.global, c.spec.n_params * sizeof(float), d, 0);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* dir/name, made empty. */
static void fresh_dir(const char *name, char *out, size_t n) {
    snprintf(out, n, "%s/%s", dir, name);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    REQUIRE(system(cmd) == 0);
}

static void state_file(const char *sdir, const char *suffix, char *out, size_t n) {
    snprintf(out, n, "%s/coordinator.state%s", sdir, suffix);
}

static float update_of(int client, int round) {
    static const float u[ROUNDS] = {0.5f, 0.05f, -0.4f, 0.02f};
    return u[(round - 1) % ROUNDS] * (client ? 1.5f : 1.0f);
}

/* A fresh coordinator (server optimizer sopt, state in sdir; tweak, when
 * given, changes it before the load) continued from sdir's state: returns
 * persist_load's resumed, or -1 with err. */
static int start_with(const char *sopt, const char *sdir, void (*tweak)(void), char *err) {
    setup_config(2, 2, 60, 1, "fedavg", 0, 0);
    snprintf(c.cfg.server_opt, sizeof c.cfg.server_opt, "%s", sopt);
    snprintf(c.cfg.state_dir, sizeof c.cfg.state_dir, "%s", sdir);
    c.cfg.rounds = ROUNDS;
    setup_start();
    if (tweak) tweak();
    int resumed = -1;
    if (persist_load(&c, &resumed, err) != 0) return -1;
    eval_fill_pending(&c);
    return resumed;
}

static int start(const char *sopt, const char *sdir) {
    char err[HFL_ERR_LEN] = "";
    int resumed = start_with(sopt, sdir, NULL, err);
    CHECK_MSG(resumed >= 0, "%s", err);
    return resumed;
}

/* Both clients say hello (again, after a restart), then rounds run until
 * the run is done or round `stop_after` closed (0: to the end). */
static void drive(int stop_after) {
    int a = hello("a", 100), b = hello("b", 300);
    for (int guard = 0; !c.done && guard < 2 * ROUNDS; guard++) {
        rounds_tick(&c);
        if (!CHECK_MSG(c.r.open, "round %d did not open", c.r.round + 1)) return;
        int r = c.r.round;
        pull(a, HFL_MSG_TASK), pull(b, HFL_MSG_TASK);
        accept(a, 100, 0.5, update_of(0, r));
        accept(b, 300, 0.5, update_of(1, r));
        rounds_tick(&c);
        CHECK_MSG(!c.r.open && c.version == r, "round %d: open %d, version %d", r, c.r.open, c.version);
        if (r == stop_after) return;
    }
}

/* Every round once, in order, evaluated, with the uninterrupted run's test
 * loss (ref; NULL: that run itself). */
static void check_log(const char *what, const double *ref) {
    const cJSON *log = log_as_json();
    CHECK_MSG(cJSON_GetArraySize(log) == ROUNDS, "%s: %d rounds logged", what, cJSON_GetArraySize(log));
    for (int i = 0; i < cJSON_GetArraySize(log) && i < ROUNDS; i++) {
        const cJSON *o = cJSON_GetArrayItem(log, i);
        double loss = num(o, "test_loss");
        CHECK_MSG(num(o, "round") == i + 1 && !strcmp(str(o, "status"), "ok") && loss > 0 && (!ref || loss == ref[i]),
                  "%s: log entry %d: round %g, %s, test loss %.9g (uninterrupted %.9g)", what, i, num(o, "round"),
                  str(o, "status"), loss, ref ? ref[i] : loss);
    }
}

static void test_losses(double *out) {
    const cJSON *log = log_as_json();
    for (int i = 0; i < ROUNDS; i++) out[i] = num(cJSON_GetArrayItem(log, i), "test_loss");
}

/* ---------------------------------------------------------------- 1 */

static void test_roundtrip(void) {
    char sdir[600], err[HFL_ERR_LEN] = "";
    fresh_dir("roundtrip", sdir, sizeof sdir);
    CHECK(start("fedyogi", sdir) == 0);
    drive(2);
    int a = 0, b = 1;
    REQUIRE(c.n_clients == 2 && !strcmp(c.clients[a].name, "a") && !strcmp(c.clients[b].name, "b"));
    c.clients[a].revoked = 1, c.clients[a].has_plan = 0;
    snprintf(c.clients[a].left, sizeof c.clients[a].left, "certificate revoked");
    c.clients[b].codec = hfl_codec_find("fp16", err);
    c.clients[b].declared = 500;
    c.clients[b].predicted_peak = 12345.5, c.clients[b].measured_peak = 23456.25;
    c.rejected = 7, c.clip = 1.75, c.final_acc = 0.625;
    REQUIRE_MSG(persist_save(&c, err) == 0, "%s", err);
    size_t nb = NP * sizeof(float);
    float *model = hfl_malloc(nb), *m = hfl_malloc(nb), *v = hfl_malloc(nb);
    memcpy(model, c.global, nb), memcpy(m, c.sopt.m, nb), memcpy(v, c.sopt.v, nb);
    CHECK(memcmp(m, v, nb) != 0 && v[0] > 0); /* the moments differ: swapping them would show */
    char *log = cJSON_PrintUnformatted(log_as_json());
    char sha[65], hello_b[8192];
    snprintf(sha, sizeof sha, "%s", c.final_sha256);
    char *hb = cJSON_PrintUnformatted(c.clients[b].hello);
    snprintf(hello_b, sizeof hello_b, "%s", hb);
    cJSON_free(hb);
    int steps = c.sopt.steps, version = c.version;
    int64_t samples_b = c.clients[b].samples, updates_b = c.clients[b].updates;
    teardown();

    CHECK(start("fedyogi", sdir) == 1);
    CHECK_MSG(memcmp(c.global, model, nb) == 0, "the model differs after the load");
    CHECK_MSG(memcmp(c.sopt.m, m, nb) == 0, "the first moment differs after the load");
    CHECK_MSG(memcmp(c.sopt.v, v, nb) == 0, "the second moment differs after the load (v[0] %.9g, want %.9g)",
              (double)c.sopt.v[0], (double)v[0]);
    CHECK(c.sopt.steps == steps && steps == 2 && c.version == version && c.r.round == 2 && !c.r.open && !c.done);
    CHECK(c.clip == 1.75 && c.final_acc == 0.625 && c.rejected == 7 && c.restarts == 1 && !strcmp(c.final_sha256, sha));
    char *log2 = cJSON_PrintUnformatted(log_as_json());
    CHECK_MSG(!strcmp(log, log2), "round log differs:\n%s\n%s", log, log2);
    cJSON_free(log), cJSON_free(log2);
    REQUIRE(c.n_clients == 2);
    const coord_client *ca = &c.clients[a], *cb = &c.clients[b];
    CHECK(!strcmp(ca->name, "a") && ca->revoked && !ca->has_plan && !strcmp(ca->left, "certificate revoked"));
    CHECK(ca->codec == c.codec && ca->samples == 100 && ca->declared == 100 && ca->updates == 2);
    CHECK(!strcmp(cb->name, "b") && !cb->revoked && cb->has_plan && !cb->left[0]);
    CHECK(cb->codec == hfl_codec_find("fp16", NULL) && c.n_client_codecs == 1 && c.client_codecs[0] == cb->codec);
    CHECK(cb->samples == samples_b && samples_b == 300 && cb->declared == 500 && cb->updates == updates_b);
    CHECK(cb->predicted_peak == 12345.5 && cb->measured_peak == 23456.25);
    char *hb2 = cJSON_PrintUnformatted(cb->hello);
    CHECK_MSG(!strcmp(hb2, hello_b), "hello differs: %s vs %s", hb2, hello_b);
    cJSON_free(hb2);
    CHECK(!ca->token[0] && !cb->token[0] && cb->last_seen > 0 && hfl_now() - cb->last_seen < 60);
    free(model), free(m), free(v);
    teardown();

    /* a finished run comes back finished */
    fresh_dir("finished", sdir, sizeof sdir);
    CHECK(start("fedavg", sdir) == 0);
    drive(0);
    CHECK(c.done);
    teardown();
    CHECK(start("fedavg", sdir) == 1 && c.done && c.r.round == ROUNDS);
    teardown();

    /* a state dir of one character ("s", relative) is a state dir */
    char cwd[4096];
    REQUIRE(getcwd(cwd, sizeof cwd) != NULL && chdir(dir) == 0);
    CHECK(start("fedavg", "s") == 0);
    drive(1);
    teardown();
    CHECK_MSG(start("fedavg", "s") == 1 && c.r.round == 1, "the run in state dir 's' did not continue");
    teardown();
    REQUIRE(chdir(cwd) == 0);
}

/* ---------------------------------------------------------------- 2 */

/* Runs a child coordinator continued from sdir and armed to die at point:
 * 1 when it was killed there, having first checked it continued after
 * round `from` (0: a fresh start). */
static int crash_at(const char *sopt, const char *sdir, const char *point, int from) {
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int failed = check_failures; /* the parent's so far */
        setenv("HFL_TEST_CRASH", point, 1);
        int resumed = start(sopt, sdir);
        CHECK_MSG(resumed == (from > 0) && c.r.round == from, "%s: continued after round %d (resumed %d), want %d",
                  point, c.r.round, resumed, from);
        if (check_failures == failed) drive(0);
        fflush(NULL);
        _exit(check_failures > failed ? 2 : 0); /* not killed: the crash point was not reached */
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    return CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: the child %s %d", point,
                     WIFSIGNALED(st) ? "died of signal" : "exited with", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

static void test_continue(const char *sopt) {
    char sdir[600], ref[65], got[65], what[64];
    double losses[ROUNDS];
    fresh_dir("uninterrupted", sdir, sizeof sdir);
    CHECK(start(sopt, sdir) == 0);
    drive(0);
    sha_hex(ref);
    snprintf(what, sizeof what, "%s uninterrupted", sopt);
    check_log(what, NULL);
    test_losses(losses);
    CHECK(c.done && c.version == ROUNDS && c.sopt.steps == ROUNDS);
    teardown();

    fresh_dir("stopped", sdir, sizeof sdir);
    for (int k = 1; k <= ROUNDS; k++) {
        CHECK(start(sopt, sdir) == (k > 1) && c.r.round == k - 1 && c.restarts == k - 1);
        drive(k);
        if (k < ROUNDS) teardown();
    }
    sha_hex(got);
    snprintf(what, sizeof what, "%s stopped after every round", sopt);
    check_log(what, losses);
    CHECK_MSG(c.done && !strcmp(got, ref), "%s: %s, uninterrupted %s", what, got, ref);
    printf("test_persist: %s: %s uninterrupted, %s\n", sopt, ref, !strcmp(got, ref) ? "the same stopped after every round" : got);
    teardown();

    fresh_dir("killed", sdir, sizeof sdir);
    char cur[700], prev[700], next[700];
    state_file(sdir, "", cur, sizeof cur);
    state_file(sdir, ".prev", prev, sizeof prev);
    state_file(sdir, ".new", next, sizeof next);
    CHECK(crash_at(sopt, sdir, "update:2", 0));
    CHECK(crash_at(sopt, sdir, "aggregate:3", 1));
    CHECK(crash_at(sopt, sdir, "state-write:3", 2));
    CHECK(access(cur, F_OK) == 0 && access(next, F_OK) == 0); /* round 3 written as .new only */
    CHECK(crash_at(sopt, sdir, "state-rename:3", 2));
    CHECK_MSG(access(cur, F_OK) != 0 && access(prev, F_OK) == 0 && access(next, F_OK) == 0,
              "between the renames: the current state is gone, .prev and .new are there");
    CHECK(start(sopt, sdir) == 1 && c.r.round == 2);
    drive(0);
    sha_hex(got);
    snprintf(what, sizeof what, "%s killed 4 times", sopt);
    check_log(what, losses);
    CHECK_MSG(c.done && !strcmp(got, ref), "%s: %s, uninterrupted %s", what, got, ref);
    printf("test_persist: %s: %s\n", what, !strcmp(got, ref) ? "the uninterrupted run's model" : got);
    teardown();
}

/* ---------------------------------------------------------------- 3 */

/* Writes path as a state file of the documented format around json and
 * bin (magic, format, lengths, SHA-256 of JSON and binary). */
static void write_state(const char *path, const char *json, const void *bin, size_t bl, uint32_t format) {
    char err[HFL_ERR_LEN];
    size_t jl = strlen(json);
    uint8_t *buf = hfl_calloc(64 + jl + bl, 1);
    memcpy(buf, "HFLCOORD", 8);
    memcpy(buf + 8, &format, 4);
    uint64_t lens[2] = {jl, bl};
    memcpy(buf + 16, lens, 16);
    memcpy(buf + 64, json, jl);
    if (bl) memcpy(buf + 64 + jl, bin, bl);
    mbedtls_sha256_ret(buf + 64, jl + bl, buf + 32, 0);
    REQUIRE_MSG(hfl_write_file_atomic(path, buf, 64 + jl + bl, err) == 0, "%s", err);
    free(buf);
}

typedef struct {
    const char *what, *why; /* the damage, and what the error says of it */
} damage;

static const damage damages[] = {
    {"a JSON byte flipped", "is damaged (checksum)"},
    {"the last binary byte flipped", "is damaged (checksum)"},
    {"one byte short", "lengths do not match its"},
    {"empty", "is not a coordinator state"},
    {"the header alone", "lengths do not match its"},
    {"another magic", "is not a coordinator state"},
    {"format 2", "format 2 or lengths"},
    {"a JSON length past the end", "lengths do not match its"},
    {"JSON that is not an object", "state JSON does not parse"},
};

/* The pristine state's bytes, damaged as damages[k] says, into path. */
static void write_damaged(const char *path, const uint8_t *good, size_t len, int k) {
    char err[HFL_ERR_LEN];
    uint8_t *b = hfl_malloc(len);
    memcpy(b, good, len);
    size_t n = len;
    uint32_t two = 2;
    uint64_t huge = len;
    switch (k) {
    case 0: b[64 + 10] ^= 0x20; break;
    case 1: b[len - 1] ^= 1; break;
    case 2: n = len - 1; break;
    case 3: n = 0; break;
    case 4: n = 64; break;
    case 5: b[0] = 'X'; break;
    case 6: memcpy(b + 8, &two, 4); break;
    case 7: memcpy(b + 16, &huge, 8); break;
    case 8: write_state(path, "[1, 2]", NULL, 0, 1); free(b); return;
    }
    REQUIRE_MSG(hfl_write_file_atomic(path, b, n, err) == 0, "%s", err);
    free(b);
}

/* A FedAdam run in dir/name stopped after `rounds`: its state files' paths. */
static void run_stopped(const char *name, int rounds, char sdir[600], char cur[700], char prev[700]) {
    fresh_dir(name, sdir, 600);
    state_file(sdir, "", cur, 700);
    state_file(sdir, ".prev", prev, 700);
    CHECK(start("fedadam", sdir) == 0);
    drive(rounds);
    teardown();
}

static void test_fallback(void) {
    char sdir[600], cur[700], prev[700], err[HFL_ERR_LEN];
    run_stopped("fallback", 2, sdir, cur, prev); /* the current state is round 2's, .prev round 1's */
    size_t len, plen;
    uint8_t *good = (uint8_t *)hfl_read_file(cur, &len, err), *pgood = (uint8_t *)hfl_read_file(prev, &plen, err);
    REQUIRE(good && pgood && len > 64 && plen > 64);
    for (int k = 0; k < (int)(sizeof damages / sizeof *damages); k++) {
        write_damaged(cur, good, len, k);
        int resumed = start_with("fedadam", sdir, NULL, err);
        CHECK_MSG(resumed == 1 && c.r.round == 1 && c.version == 1 && c.sopt.steps == 1,
                  "current state %s, .prev kept: resumed %d after round %d (want round 1 from .prev): %s",
                  damages[k].what, resumed, c.r.round, resumed < 0 ? err : "");
        teardown();
        /* without .prev: refused, saying why */
        unlink(prev);
        CHECK_MSG(start_with("fedadam", sdir, NULL, err) == -1 && strstr(err, damages[k].why) &&
                      strstr(err, "no usable state") && strstr(err, "coordinator.state.prev"),
                  "current state %s, no .prev: '%s'", damages[k].what, err);
        teardown();
        REQUIRE(hfl_write_file_atomic(prev, pgood, plen, err) == 0);
    }
    /* no current state (killed between the renames): .prev */
    unlink(cur);
    CHECK(start("fedadam", sdir) == 1 && c.r.round == 1);
    teardown();
    /* both damaged: both reasons */
    write_damaged(cur, good, len, 0);
    write_damaged(prev, pgood, plen, 5);
    CHECK_MSG(start_with("fedadam", sdir, NULL, err) == -1 && strstr(err, "damaged (checksum)") &&
                  strstr(err, "is not a coordinator state"),
              "%s", err);
    teardown();
    /* neither there: a fresh run */
    unlink(cur), unlink(prev);
    CHECK(start("fedadam", sdir) == 0 && c.r.round == 0 && c.restarts == 0);
    teardown();
    free(good), free(pgood);
}

/* ---------------------------------------------------------------- 4 */

static void t_seed(void) { c.cfg.seed++; }
static void t_block(void) { c.cfg.block *= 2; }
static void t_k(void) { c.cfg.clients_per_round++; }
static void t_strategy(void) { snprintf(c.cfg.strategy, sizeof c.cfg.strategy, "median"); }
static void t_batch(void) { c.cfg.batch++; }
static void t_epochs(void) { c.cfg.local_epochs++; }
static void t_lr(void) { c.cfg.lr *= 2; }
static void t_codec(void) { c.codec = hfl_codec_find("int8", NULL); }
static void t_adamw(void) { c.cfg.optimizer = HFL_OPTIM_ADAMW, c.cfg.beta1 = 0.9, c.cfg.beta2 = 0.999; }
static void t_params(void) { c.spec.n_params--; }

/* The state file's JSON with the text `from` replaced by `to` (first occurrence). */
static void rewrite_json(const char *path, const uint8_t *good, const char *from, const char *to) {
    uint64_t lens[2];
    memcpy(lens, good + 16, 16);
    char *json = hfl_malloc(lens[0] + strlen(to) + 1);
    memcpy(json, good + 64, lens[0]);
    json[lens[0]] = 0;
    char *at = strstr(json, from);
    REQUIRE_MSG(at != NULL, "no '%s' in the state", from);
    memmove(at + strlen(to), at + strlen(from), strlen(at + strlen(from)) + 1);
    memcpy(at, to, strlen(to));
    write_state(path, json, good + 64 + lens[0], lens[1], 1);
    free(json);
}

static void test_refusals(void) {
    char sdir[600], cur[700], prev[700], err[HFL_ERR_LEN];
    run_stopped("refusals", 1, sdir, cur, prev);
    size_t len;
    uint8_t *good = (uint8_t *)hfl_read_file(cur, &len, err);
    REQUIRE(good);
    /* the run's fingerprint is these settings and no more (an SGD run
     * without LoRA): states written before AdamW and LoRA still resume */
    cJSON *saved = cJSON_ParseWithLength((const char *)good + 64, len - 64), *want_run = cJSON_Parse(
        "{\"model\":\"mlp\",\"params\":199210,\"codec\":\"fp32\",\"block\":256,\"seed\":7,\"clients_per_round\":2,"
        "\"strategy\":\"fedavg\",\"server_opt\":\"fedadam\",\"batch\":16,\"local_epochs\":3,\"lr\":0.25}");
    CHECK_MSG(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(saved, "run"), want_run, 1), "the fingerprint: %s",
              cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(saved, "run")));
    cJSON_Delete(saved), cJSON_Delete(want_run);
    static const struct {
        void (*tweak)(void);
        const char *what;
    } others[] = {{t_seed, "(seed 7 there, 8 here)"},
                  {t_block, "(block 256 there, 512 here)"},
                  {t_k, "(clients_per_round 2 there, 3 here)"},
                  {t_strategy, "(strategy \"fedavg\" there, \"median\" here)"},
                  {t_batch, "(batch 16 there, 17 here)"},
                  {t_epochs, "(local_epochs 3 there, 4 here)"},
                  {t_lr, "(lr 0.25 there, 0.5 here)"},
                  {t_codec, "(codec \"fp32\" there, \"int8\" here)"},
                  {t_adamw, "(optimizer none there, \"adamw\" here; beta1 none there, 0.9 here; beta2 none there, 0.999 here)"},
                  {t_params, "(params 199210 there, 199209 here)"}};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        CHECK_MSG(start_with("fedadam", sdir, others[i].tweak, err) == -1 && strstr(err, "it holds another run ") &&
                      strstr(err, others[i].what) && strstr(err, "): use another --state-dir"),
                  "another run %s: '%s'", others[i].what, err);
        teardown();
    }
    CHECK_MSG(start_with("fedyogi", sdir, NULL, err) == -1 &&
                  strstr(err, "(server_opt \"fedadam\" there, \"fedyogi\" here)"), "%s", err);
    teardown();
    /* well-formed files that do not fit: refused, no fallback to .prev */
    static const struct {
        const char *from, *to, *why;
    } bad[] = {{"\"sopt_v\":true", "\"sopt_v\":false", "does not fit this model and server optimizer"},
               {"\"registry\":[", "\"registry\":{},\"old_registry\":[", "state registry is malformed"},
               {"\"name\":\"a\"", "\"name\":\"\"", "state registry entry 0 has no name"},
               {"\"codec\":\"fp32\",\"has_plan\"", "\"codec\":\"fp99\",\"has_plan\"", "fp99"},
               {"\"round_log\":[", "\"round_log\":{},\"old_log\":[", "its round log is malformed"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rewrite_json(cur, good, bad[i].from, bad[i].to);
        CHECK_MSG(start_with("fedadam", sdir, NULL, err) == -1 && strstr(err, bad[i].why) &&
                      !strncmp(err, "--state-dir ", 12),
                  "%s: '%s'", bad[i].to, err);
        teardown();
    }
    /* the rewriter itself keeps a good state good */
    rewrite_json(cur, good, "\"round\":1", "\"round\":1");
    CHECK(start("fedadam", sdir) == 1 && c.r.round == 1);
    teardown();
    free(good);
    /* a state dir under a file cannot be made */
    char file[700];
    snprintf(file, sizeof file, "%s/a-file", dir);
    REQUIRE(hfl_write_file_atomic(file, "x", 1, err) == 0);
    strcat(file, "/state");
    CHECK(start_with("fedadam", file, NULL, err) == -1 && err[0]);
    teardown();
}

/* ---------------------------------------------------------------- 5 */

static void test_syscalls(void) {
    char sdir[600], err[HFL_ERR_LEN], want[8192];
    fresh_dir("syscalls", sdir, sizeof sdir);
    CHECK(start("fedavg", sdir) == 0);
    int pid = (int)getpid();
    const char *s = sdir;
    syscall_log_start();
    CHECK_MSG(persist_save(&c, err) == 0, "%s", err);
    const char *got = syscall_log_stop();
    snprintf(want, sizeof want,
             "write %s/coordinator.state.new.tmp.%d\nfsync %s/coordinator.state.new.tmp.%d\n"
             "rename %s/coordinator.state.new.tmp.%d %s/coordinator.state.new\nfsync %s\n"
             "rename %s/coordinator.state.new %s/coordinator.state\nfsync %s\n",
             s, pid, s, pid, s, pid, s, s, s, s, s);
    CHECK_MSG(!strcmp(got, want), "the first save:\n%s\nwant:\n%s", got, want);
    syscall_log_start();
    CHECK_MSG(persist_save(&c, err) == 0, "%s", err);
    got = syscall_log_stop();
    snprintf(want, sizeof want,
             "write %s/coordinator.state.new.tmp.%d\nfsync %s/coordinator.state.new.tmp.%d\n"
             "rename %s/coordinator.state.new.tmp.%d %s/coordinator.state.new\nfsync %s\n"
             "rename %s/coordinator.state %s/coordinator.state.prev\n"
             "rename %s/coordinator.state.new %s/coordinator.state\nfsync %s\n",
             s, pid, s, pid, s, pid, s, s, s, s, s, s, s);
    CHECK_MSG(!strcmp(got, want), "a later save:\n%s\nwant:\n%s", got, want);
    teardown();
    /* without --state-dir: nothing */
    setup(2, 2, 60, 1);
    syscall_log_start();
    CHECK(persist_save(&c, err) == 0);
    got = syscall_log_stop();
    CHECK_MSG(!got[0], "saved without --state-dir:\n%s", got);
    int resumed = -1;
    CHECK(persist_load(&c, &resumed, err) == 0 && resumed == 0);
    teardown();
}

static void test_continue_fedadam(void) { test_continue("fedadam"); }
static void test_continue_fedyogi(void) { test_continue("fedyogi"); }

static const check_case cases[] = {
    {"roundtrip", test_roundtrip},
    {"continue_fedadam", test_continue_fedadam},
    {"continue_fedyogi", test_continue_fedyogi},
    {"fallback", test_fallback},
    {"refusals", test_refusals},
    {"syscalls", test_syscalls},
};

/* The directory every case writes in, made once; then the cases. */
int main(int argc, char **argv) {
    char tmpl[] = "/tmp/hfl-test-persist-XXXXXX";
    char real[4096];
    REQUIRE(mkdtemp(tmpl) != NULL);
    REQUIRE(realpath(tmpl, real) != NULL && strlen(real) < 200); /* as /proc/self/fd names it */
    snprintf(dir, sizeof dir, "%s", real);
    double t0 = hfl_now();
    int rc = check_run("test_persist", cases, CHECK_CASES(cases), argc, argv);
    fprintf(stderr, "test_persist: %.1f s\n", hfl_now() - t0); /* stderr: --list prints names alone */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!getenv("HFL_KEEP_TMP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
