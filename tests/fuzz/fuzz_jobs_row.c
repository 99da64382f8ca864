/* Fuzz target: the jobs-row loader (issue 24). The input is read as the seven columns of a stored row
 * (id, owner, state, created, finished, json, seq), each a type byte (NULL, INTEGER, REAL, TEXT, BLOB
 * as SQLite returns them) and its value (8 bytes, or a 2-byte length and the bytes), which is what a
 * crafted or damaged --jobs-db file can hold. jobs_db_row_check decides; an accepted row must satisfy
 * every documented bound, and after jobs_import the store's answers (GET /v1/jobs/{id}, the listing)
 * must be valid JSON that names the row's id. Never a crash, overflow (UBSan) or leak. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/jobs/jobs.h"
#include "server/jobs/jobs_db.h"

typedef struct rd {
  const uint8_t *p;
  size_t n;
} rd;

static bool take(rd *r, void *out, size_t k) {
  if (r->n < k)
    return false;
  memcpy(out, r->p, k);
  r->p += k;
  r->n -= k;
  return true;
}

static cJSON *parsed(char *s) {
  cJSON *o = s ? cJSON_Parse(s) : NULL;
  free(s);
  return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rd r = {data, size};
  jobs_db_cell cells[JOBS_DB_NCOLS];
  char *texts[JOBS_DB_NCOLS] = {0};
  memset(cells, 0, sizeof cells);
  for (int c = 0; c < JOBS_DB_NCOLS; c++) {
    uint8_t ty = 0;
    if (!take(&r, &ty, 1))
      ty = 0;
    cells[c].type = (jobs_db_type)(ty % 5);
    switch (cells[c].type) {
    case JOBS_DB_INT:
      if (!take(&r, &cells[c].i, 8))
        cells[c].i = 0;
      break;
    case JOBS_DB_REAL:
      if (!take(&r, &cells[c].f, 8))
        cells[c].f = 0;
      break;
    case JOBS_DB_TEXT:
    case JOBS_DB_BLOB: {
      uint16_t len = 0;
      if (!take(&r, &len, 2))
        len = 0;
      if (len > r.n)
        len = (uint16_t)r.n;
      /* SQLite's text is NUL-terminated (and may hold NULs before that) */
      texts[c] = malloc((size_t)len + 1);
      if (!texts[c])
        abort();
      memcpy(texts[c], r.p, len);
      texts[c][len] = '\0';
      r.p += len;
      r.n -= len;
      cells[c].s = texts[c];
      cells[c].n = len;
      break;
    }
    default:
      break;
    }
  }
  jobs_db_row row;
  char why[128];
  if (jobs_db_row_check(cells, &row, why, sizeof why)) {
    /* the documented bounds */
    size_t idn = strlen(row.id);
    if (idn < 5 || idn >= JOBS_ID_CAP || strncmp(row.id, "job-", 4))
      abort();
    for (size_t i = 4; i < idn; i++)
      if (!(islower((unsigned char)row.id[i]) || isdigit((unsigned char)row.id[i]) || row.id[i] == '-'))
        abort();
    if (strlen(row.owner) >= JOBS_OWNER_CAP || row.state < 0 || row.state > 3 || row.seq < 1 ||
        row.seq > JOBS_DB_SEQ_MAX || row.created < 0 || row.created > JOBS_DB_TIME_MAX || !isfinite(row.finished_unix))
      abort();
    if (row.state >= 2) {
      cJSON *j = row.json ? cJSON_Parse(row.json) : NULL;
      if (!cJSON_IsObject(j))
        abort();
      cJSON_Delete(j);
    }
    jobs *j = NULL;
    if (jobs_init(4, 1e12, &j) != QVL_OK || jobs_import(j, &row, 100, 1.8e9) != QVL_OK)
      abort();
    cJSON *one = parsed(jobs_get_json(j, row.id, 100));
    cJSON *list = parsed(jobs_list_json(j, row.owner, 100, 10, NULL));
    const cJSON *id = cJSON_GetObjectItem(one, "id");
    if (!one || !list || !cJSON_IsString(id) || strcmp(id->valuestring, row.id) ||
        cJSON_GetArraySize(cJSON_GetObjectItem(list, "data")) != 1)
      abort();
    cJSON_Delete(one);
    cJSON_Delete(list);
    /* the next job continues the sequence without overflow */
    char fresh[JOBS_ID_CAP];
    if (jobs_add_owned(j, 100, row.owner, fresh) != QVL_OK)
      abort();
    jobs_free(j);
  } else if (!why[0]) {
    abort(); /* a refusal always says why */
  }
  for (int c = 0; c < JOBS_DB_NCOLS; c++)
    free(texts[c]);
  return 0;
}
