/* fuzz-http-request.c: the HTTP API's request bodies (core/http/api.c). The first byte
 * picks the endpoint (completions, chat completions, /generate: its value modulo 3) and
 * strict parsing ([server] strict_api: its bit 2), the rest is the body. A
 * refusal must format as OpenAI's error JSON; an accepted request goes on to the prompt
 * encoding the server does next (the chat template or the raw prompt, byte tokenizer). */
#include "tests/fuzz/fuzz.h"

#include <stdlib.h>

#include "core/http/api.h"

static dsv4_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = dsv4_tokenizer_byte_new();
    if (!tok)
        dsv4_fuzz_fail("out of memory");
    return 0;
}

static void encode(const dsv4_api_request *req)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char err[256];
    if (req->kind == DSV4_API_CHAT)
        dsv4_chat_encode(tok, req->messages, req->n_messages, &ids, &n, err, sizeof(err));
    else if (req->prompt)
        dsv4_chat_encode_prompt(tok, req->prompt, req->prompt_len, &ids, &n, err, sizeof(err));
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const dsv4_api_kind kinds[] = {DSV4_API_COMPLETION, DSV4_API_CHAT, DSV4_API_GENERATE};
    dsv4_api_request req;
    dsv4_api_error err;
    if (dsv4_api_parse(kinds[data[0] % 3], (const char *)data + 1, size - 1, data[0] & 4, &req,
                       &err) == 0) {
        encode(&req);
        dsv4_api_request_free(&req);
    } else {
        char *json = dsv4_api_error_json(&err);
        if (!json)
            dsv4_fuzz_fail("refusal does not format (%s)", err.message);
        free(json);
    }
    return 0;
}
