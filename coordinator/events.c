/* events.c: the coordinator's JSON-lines event log (--log).
 *
 * Every event (round opened, update accepted, a client left, round closed)
 * is one line of JSON with its time `t` since the start, flushed at once so
 * `hfl-sim` can follow progress. It sits apart from the report renderer
 * (report.c), which reads the registry: the registry and auth log here, so
 * no coordinator files call each other in a circle. */
#include <stdio.h>
#include <stdlib.h>

#include "coordinator/coord.h"
#include "util/util.h"

void events_log(coord *c, cJSON *event) {
    if (c->log) {
        cJSON_AddNumberToObject(event, "t", hfl_now() - c->started);
        char *line = cJSON_PrintUnformatted(event);
        if (line) {
            fprintf(c->log, "%s\n", line);
            fflush(c->log);
            free(line);
        }
    }
    cJSON_Delete(event);
}
