/* state.c: the client's state file, so error feedback survives a restart.
 *
 * The residual of a biased codec carries what earlier updates failed to
 * send; losing it on a reconnect loses that signal. After every update the
 * client writes <state-dir>/<name>.state atomically (write, fsync, rename):
 * a 16-byte header (magic 'HFLS', version 3, n, CRC-32C of the rest), the
 * model and codec names (32 bytes each), n fp32 residuals, then the update
 * they go with (client_pending: i32 round, i32 version, f64 loss, f64
 * seconds, f64 simulated seconds, u32 length, the bytes; round 0 and length
 * 0 when none). One file,
 * one rename: a residual is never on disk without the update it produced.
 * On start it reads the file back only if model, codec and n all match;
 * anything else (missing, short, wrong CRC, an older version) starts from a zero
 * residual and says why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "proto/msg.h"
#include "util/util.h"

#define STATE_MAGIC 0x534C4648u /* "HFLS" */
#define STATE_HEADER 16
#define STATE_NAMES 64
#define STATE_PENDING 36
#define STATE_VERSION 3

static void state_path(const char *dir, const char *name, char *out, size_t n) {
    snprintf(out, n, "%s/%s.state", dir, name);
}

int client_state_save(const char *dir, const char *name, const char *model, const char *codec,
                      const float *residual, size_t n, const client_pending *p, char *err) {
    char path[1200];
    state_path(dir, name, path, sizeof path);
    size_t plen = p && p->round > 0 ? p->len : 0, base = STATE_HEADER + STATE_NAMES + n * sizeof(float);
    size_t len = base + STATE_PENDING + plen;
    uint8_t *buf = hfl_calloc(1, len);
    snprintf((char *)buf + STATE_HEADER, 32, "%s", model);
    snprintf((char *)buf + STATE_HEADER + 32, 32, "%s", codec);
    memcpy(buf + STATE_HEADER + STATE_NAMES, residual, n * sizeof(float));
    if (plen) {
        int32_t rv[2] = {p->round, p->version};
        double ls[3] = {p->loss, p->seconds, p->sim_s};
        uint32_t l32 = (uint32_t)plen;
        memcpy(buf + base, rv, 8);
        memcpy(buf + base + 8, ls, 24);
        memcpy(buf + base + 32, &l32, 4);
        memcpy(buf + base + STATE_PENDING, p->bytes, plen);
    }
    uint32_t head[4] = {STATE_MAGIC, STATE_VERSION, (uint32_t)n, hfl_crc32c(0, buf + STATE_HEADER, len - STATE_HEADER)};
    memcpy(buf, head, sizeof head);
    int rc = hfl_write_file_atomic(path, buf, len, err);
    free(buf);
    return rc;
}

int client_state_load(const char *dir, const char *name, const char *model, const char *codec,
                      float *residual, size_t n, client_pending *p, char *why) {
    char path[1200], err[HFL_ERR_LEN];
    state_path(dir, name, path, sizeof path);
    size_t len;
    uint8_t *buf = (uint8_t *)hfl_read_file(path, &len, err);
    if (!buf) return hfl_errf(why, "no state file %s", path);
    uint32_t head[4];
    int rc = -1;
    size_t base = STATE_HEADER + STATE_NAMES + n * sizeof(float);
    uint32_t plen = 0;
    if (len >= base + STATE_PENDING) memcpy(&plen, buf + base + 32, 4);
    if (len < base + STATE_PENDING || len != base + STATE_PENDING + plen) {
        hfl_errf(why, "%s has %zu bytes, expected %zu for %zu parameters", path, len, base + STATE_PENDING + plen, n);
        goto out;
    }
    memcpy(head, buf, sizeof head);
    if (head[0] != STATE_MAGIC || head[1] != STATE_VERSION || head[2] != n ||
        head[3] != hfl_crc32c(0, buf + STATE_HEADER, len - STATE_HEADER)) {
        hfl_errf(why, "%s is damaged (header or CRC)", path);
        goto out;
    }
    const char *m = (const char *)buf + STATE_HEADER, *c = m + 32;
    if (strncmp(m, model, 32) != 0 || strncmp(c, codec, 32) != 0) {
        hfl_errf(why, "%s was written for %.31s/%.31s, now %s/%s", path, m, c, model, codec);
        goto out;
    }
    memcpy(residual, buf + STATE_HEADER + STATE_NAMES, n * sizeof(float));
    if (p && plen) {
        int32_t rv[2];
        double ls[3];
        memcpy(rv, buf + base, 8);
        memcpy(ls, buf + base + 8, 24);
        free(p->bytes);
        p->round = rv[0], p->version = rv[1], p->loss = ls[0], p->seconds = ls[1], p->sim_s = ls[2];
        p->bytes = hfl_malloc(plen);
        memcpy(p->bytes, buf + base + STATE_PENDING, plen);
        p->len = plen;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}
