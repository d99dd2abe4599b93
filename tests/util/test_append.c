/* test_append.c: hfl_append_line (util/util.h) from several processes at
 * once. Four forked writers each append 40 lines of 9,000 bytes (one letter
 * repeated: a, b, c, d) to one file; stdio would write each such line in
 * buffer-sized pieces that the others' pieces can fall between. The oracle
 * is the file alone: exactly 160 lines, each 9,000 copies of one letter, 40
 * of each. Then a path in a directory that is not there: -1 and one line
 * naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/check.h"
#include "util/util.h"

enum { WRITERS = 4, LINES = 40, WIDTH = 9000 };

static void test_concurrent(void) {
    char path[] = "/tmp/hfl-test-append-XXXXXX", err[HFL_ERR_LEN];
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        REQUIRE(pids[w] >= 0);
        if (pids[w] == 0) {
            char *line = malloc(WIDTH + 1);
            memset(line, 'a' + w, WIDTH);
            line[WIDTH] = 0;
            for (int i = 0; i < LINES; i++)
                if (hfl_append_line(path, line, err) != 0) _exit(1);
            _exit(0);
        }
    }
    for (int w = 0; w < WRITERS; w++) {
        int status = 0;
        waitpid(pids[w], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    size_t len = 0;
    char *text = hfl_read_file(path, &len, err);
    REQUIRE_MSG(text, "%s", err);
    int lines = 0, per[WRITERS] = {0}, whole = 1;
    for (size_t at = 0; at < len; lines++) {
        char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        int one = n == WIDTH && text[at] >= 'a' && text[at] < 'a' + WRITERS;
        for (size_t i = 1; one && i < n; i++) one = text[at + i] == text[at];
        if (one) per[text[at] - 'a']++;
        whole &= one;
        at += n + 1;
    }
    CHECK_MSG(lines == WRITERS * LINES && whole, "%d lines, every one whole: %d", lines, whole);
    for (int w = 0; w < WRITERS; w++) CHECK_MSG(per[w] == LINES, "writer %d: %d lines", w, per[w]);
    free(text);
    unlink(path);
    CHECK(hfl_append_line("/nonexistent-dir/x.jsonl", "x", err) == -1 && strstr(err, "/nonexistent-dir/x.jsonl") &&
          !strchr(err, '\n'));
}

static const check_case cases[] = {
    {"concurrent", test_concurrent},
};

int main(int argc, char **argv) { return check_run("test_append", cases, CHECK_CASES(cases), argc, argv); }
