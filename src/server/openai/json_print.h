/* Printing a reply object that is built only to be sent. Thread safety: pure function. */
#ifndef QVL_SERVER_OPENAI_JSON_PRINT_H
#define QVL_SERVER_OPENAI_JSON_PRINT_H

#include <cjson/cJSON.h>

/* Prints o unformatted and deletes it: the text (free with free()), NULL when o is NULL or out of
 * memory. */
char *json_print_take(cJSON *o);

#endif
