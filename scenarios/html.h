/* html.h: a run's report as one self-contained HTML page (inline SVG, no
 * scripts, nothing fetched): the run's settings and outcome, test accuracy
 * against round and against wall time, bytes per round, each client's
 * predicted and measured peak memory against its budget, a
 * participation timeline (who was drawn each round and what came of it),
 * and the plans clients changed when their memory shrank (re-plans: round,
 * client, old and new plan, the budget). */
#ifndef HFL_HTML_H
#define HFL_HTML_H

#include <cjson/cJSON.h>

/* Writes the page for report `rep` (the coordinator's JSON report, as hfl-sim
 * completes it) to path; -1 with err when it cannot be written. */
int hfl_html_report(const cJSON *rep, const char *path, char *err);

#endif
