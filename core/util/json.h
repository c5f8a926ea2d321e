/* json.h: small helpers shared by the JSON readers (config.json, tokenizer.json, ...). */
#ifndef DSV4_CORE_JSON_H
#define DSV4_CORE_JSON_H

#include <jansson.h>

/* What a JSON value is, as a message would say it: "an object", "an array", "a string",
 * "an integer", "a number", "a boolean" or "null". */
const char *dsv4_json_kind(const json_t *v);

#endif
