/* t-http-refusal-is-json-whatever-the-bytes: a refusal quotes what the client sent, and it
 * must still go out as a JSON error body when those bytes are not UTF-8 or the message is
 * cut inside a sequence (found by tests/fuzz/fuzz-http-request: the server closed the
 * connection without an answer). Bytes that are not well-formed UTF-8 become '?'. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/http/api.h"
#include "tests/tap.h"

/* The message of the error body, or NULL when the body is not JSON of that shape. */
static char *message_of(const dsv4_api_error *err)
{
    char *body = dsv4_api_error_json(err);
    json_t *root = body ? json_loads(body, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(json_object_get(root, "error"), "message"));
    char *copy = msg ? strdup(msg) : NULL;
    json_decref(root);
    free(body);
    return copy;
}

int main(void)
{
    plan(4);
    /* jansson quotes the bad escape and the invalid bytes after it */
    static const char body[] = "{\"prompt\": \"Once \\u13\xcc\x91\xdf\x95 time\"}";
    dsv4_api_request req;
    dsv4_api_error err;
    ok(dsv4_api_parse(DSV4_API_COMPLETION, body, strlen(body), false, &req, &err) != 0 &&
           err.status == 400,
       "a bad escape followed by invalid UTF-8 is refused with 400");
    char *msg = message_of(&err);
    ok(msg && strstr(msg, "invalid escape"), "the refusal is a JSON error body (%s)",
       msg ? msg : "none");
    free(msg);

    /* 300 two-byte characters: the 512-byte message ends inside one */
    char text[601];
    for (int i = 0; i < 300; i++)
        memcpy(text + 2 * i, "\xc3\xa9", 2);
    text[600] = 0;
    dsv4_api_fail(&err, 400, "invalid_value", "prompt", "%s", text);
    msg = message_of(&err);
    ok(msg != NULL, "a message cut inside a UTF-8 sequence still formats as JSON");
    is_int(msg ? (long long)strlen(msg) : -1, 511, "only the cut sequence's byte became '?'");
    free(msg);
    return done_testing();
}
