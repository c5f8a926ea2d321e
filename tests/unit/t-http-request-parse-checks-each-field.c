/* t-http-request-parse-checks-each-field: request bodies of the generation endpoints are
 * read with OpenAI's field names and defaults, and every malformed body is refused with
 * status 400 naming the offending parameter, before any model work. */
#include <string.h>

#include "core/http/api.h"
#include "tests/tap.h"

static dsv4_api_error err;
static bool strict; /* [server] strict_api for the parses below */

static int parse(dsv4_api_kind kind, const char *body, dsv4_api_request *req)
{
    memset(&err, 0, sizeof(err));
    return dsv4_api_parse(kind, body, strlen(body), strict, req, &err);
}

/* Whether body parses (the request freed again). */
static bool parses(dsv4_api_kind kind, const char *body)
{
    dsv4_api_request req;
    if (parse(kind, body, &req) != 0)
        return false;
    dsv4_api_request_free(&req);
    return true;
}

/* Bodies the checks below parse both ways, lax and strict. */
static const char full_completion[] =
    "{\"model\":\"m\",\"prompt\":\"hi\",\"max_tokens\":5,\"temperature\":0.5,\"top_p\":0.9,"
    "\"top_k\":7,\"seed\":-3,\"stop\":[\"a\",\"bc\"],\"stream\":true,\"stream_options\":{"
    "\"include_usage\":true},\"n\":1,\"user\":\"x\"}";
static const char parts_chat[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{"
    "\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
    "\"max_completion_tokens\":9,\"logprobs\":true}";
static const char generate_ids[] = "{\"input_ids\":[5,6],\"max_tokens\":3,\"logprobs\":true}";

/* The body is refused with 400 and param (NULL: no param). */
static void refused(dsv4_api_kind kind, const char *body, const char *param, const char *what)
{
    dsv4_api_request req;
    int rc = parse(kind, body, &req);
    ok(rc != 0 && err.status == 400 && !strcmp(err.param, param ? param : "") &&
           !strcmp(err.type, "invalid_request_error"),
       "%s: 400 naming '%s' (rc %d, status %d, param '%s': %s)", what, param ? param : "", rc,
       err.status, err.param, err.message);
    if (rc == 0)
        dsv4_api_request_free(&req);
}

int main(void)
{
    plan(98);
    dsv4_api_request req;
    const dsv4_api_kind C = DSV4_API_COMPLETION, CHAT = DSV4_API_CHAT, G = DSV4_API_GENERATE;

    is_int(parse(C, full_completion, &req), 0, "a full completions body parses");
    is_str(req.prompt, "hi", "prompt text");
    ok(req.has_max_tokens && req.params.max_tokens == 5, "max_tokens");
    ok(req.params.temperature == 0.5f && req.params.top_p == 0.9f && req.params.top_k == 7,
       "temperature, top_p, top_k");
    ok(req.params.seed == (uint64_t)-3, "a negative seed is kept as its bits");
    ok(req.n_stop == 2 && !strcmp(req.stop[1], "bc"), "stop array");
    ok(req.stream && req.include_usage, "stream and stream_options.include_usage");
    is_str(req.model, "m", "model");
    dsv4_api_request_free(&req);

    is_int(parse(C, "{\"prompt\":[1,2,3],\"temperature\":null,\"stop\":\"x\"}", &req), 0,
           "a token-id prompt, null options, a stop string");
    ok(req.n_prompt_ids == 3 && req.prompt_ids[2] == 3 && !req.prompt, "the ids are kept");
    ok(!req.has_max_tokens && req.params.temperature == 1.0f && req.params.top_p == 1.0f,
       "absent options take OpenAI's defaults (temperature 1, top_p 1)");
    ok(req.n_stop == 1 && !strcmp(req.stop[0], "x"), "a single stop string");
    uint64_t unseeded = req.params.seed;
    dsv4_api_request_free(&req);
    /* an absent seed is drawn afresh (two draws of 64 bits agree with odds 2^-64); a
     * given one, 0 included, is kept */
    parse(C, "{\"prompt\":[1,2,3]}", &req);
    ok(req.params.seed != unseeded, "two requests without a seed draw different seeds");
    dsv4_api_request_free(&req);
    parse(C, "{\"prompt\":[1,2,3],\"seed\":0}", &req);
    ok(req.params.seed == 0, "seed 0 is kept");
    dsv4_api_request_free(&req);
    parse(C, "{\"prompt\":[1,2,3],\"seed\":null}", &req);
    ok(req.params.seed != 0 && req.params.seed != unseeded, "a null seed is drawn afresh too");
    dsv4_api_request_free(&req);

    is_int(parse(CHAT, parts_chat, &req), 0, "a chat body with content parts parses");
    ok(req.n_messages == 2 && req.messages[0].role == DSV4_CHAT_SYSTEM &&
           req.messages[1].role == DSV4_CHAT_USER && !strcmp(req.messages[1].content, "ab"),
       "roles and joined text parts");
    ok(req.has_max_tokens && req.params.max_tokens == 9, "max_completion_tokens");
    ok(req.params.logprobs, "chat logprobs is a boolean");
    dsv4_api_request_free(&req);

    is_int(parse(G, generate_ids, &req), 0, "a /generate body parses");
    ok(req.n_prompt_ids == 2 && req.params.logprobs && req.params.presence_penalty == 0 &&
           req.params.frequency_penalty == 0,
       "input_ids and logprobs; the penalties default to 0");
    dsv4_api_request_free(&req);
    is_int(parse(CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                 "\"presence_penalty\":-2,\"frequency_penalty\":1.5}",
                 &req),
           0, "presence and frequency penalties parse");
    ok(req.params.presence_penalty == -2.0f && req.params.frequency_penalty == 1.5f,
       "the penalties' values");
    dsv4_api_request_free(&req);
    refused(C, "{\"prompt\":\"x\",\"presence_penalty\":2.5}", "presence_penalty",
            "a presence penalty above 2");
    is_int(parse(C, "{\"prompt\":\"x\",\"logit_bias\":{\"7\":-100,\"0\":2.5,\"123\":100}}", &req),
           0, "a logit_bias object parses");
    bool found = req.params.n_logit_bias == 3;
    for (uint32_t i = 0; found && i < 3; i++) {
        const dsv4_logit_bias *b = &req.params.logit_bias[i];
        found = (b->token == 7 && b->bias == -100) || (b->token == 0 && b->bias == 2.5f) ||
                (b->token == 123 && b->bias == 100);
    }
    ok(found, "its three token ids and biases");
    dsv4_api_request_free(&req);
    refused(C, "{\"prompt\":\"x\",\"logit_bias\":[1]}", "logit_bias", "logit_bias as an array");
    refused(C, "{\"prompt\":\"x\",\"logit_bias\":{\"07\":1}}", "logit_bias",
            "a logit_bias id with a leading zero (it could name an id twice)");
    refused(C, "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "logit_bias",
            "a negative logit_bias id");
    refused(C, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", "logit_bias",
            "a logit_bias over 100");
    refused(C, "{\"prompt\":\"x\",\"logit_bias\":{\"99999999999\":1}}", "logit_bias",
            "a logit_bias id past 32 bits");
    refused(G, "{\"input_ids\":[1],\"frequency_penalty\":\"1\"}", "frequency_penalty",
            "a frequency penalty as a string");

    refused(C, "{\"prompt\":\"x\"", NULL, "truncated JSON");
    refused(C, "[1,2]", NULL, "a body that is not an object");
    refused(C, "{\"prompt\":\"x\",\"prompt\":\"y\"}", NULL, "a duplicate key");
    refused(C, "{}", "prompt", "no prompt");
    refused(C, "{\"prompt\":\"\"}", "prompt", "an empty prompt");
    refused(C, "{\"prompt\":7}", "prompt", "a prompt of the wrong type");
    refused(C, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "a batch of prompts");
    refused(C, "{\"prompt\":[1,-2]}", "prompt", "a negative token id");
    refused(C, "{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens", "negative max_tokens");
    refused(C, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", "zero max_tokens");
    is_int(parse(C, "{\"prompt\":\"x\",\"max_tokens\":0,\"echo\":true}", &req), 0,
           "zero max_tokens with echo parses (the prompt scored, nothing generated)");
    ok(req.has_max_tokens && req.params.max_tokens == 0, "and keeps its 0");
    dsv4_api_request_free(&req);
    refused(C, "{\"prompt\":\"x\",\"max_tokens\":99999999999}", "max_tokens", "huge max_tokens");
    refused(C, "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", "max_tokens", "max_tokens as a string");
    refused(C, "{\"prompt\":\"x\",\"temperature\":3}", "temperature", "temperature above 2");
    refused(C, "{\"prompt\":\"x\",\"top_p\":0}", "top_p", "top_p of 0");
    refused(C, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream", "stream as a string");
    is_int(parse(C, "{\"prompt\":\"x\",\"n\":3,\"best_of\":3}", &req), 0, "n 3, best_of 3");
    is_int(req.n_choices, 3, "n is the number of choices");
    dsv4_api_request_free(&req);
    is_int(parse(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", &req), 0, "no n");
    is_int(req.n_choices, 1, "one choice by default");
    dsv4_api_request_free(&req);
    refused(C, "{\"prompt\":\"x\",\"n\":17}", "n", "n above 16");
    refused(C, "{\"prompt\":\"x\",\"n\":0}", "n", "n of 0");
    refused(C, "{\"prompt\":\"x\",\"n\":2,\"best_of\":4}", "best_of",
            "best_of above n (ranked choices)");
    refused(G, "{\"input_ids\":[1],\"n\":2}", "n", "n above 1 on /generate");
    is_int(parse(CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":1,"
                 "\"response_format\":{\"type\":\"text\"},\"tool_choice\":\"none\",\"tools\":[],"
                 "\"repetition_penalty\":1,\"min_p\":0,\"suffix\":\"\",\"echo\":false}",
                 &req),
           0, "options dsv4d does not implement parse at their neutral values");
    dsv4_api_request_free(&req);
    refused(CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
            "\"response_format\":{\"type\":\"json_object\"}}",
            "response_format", "JSON mode (structured output)");
    refused(C, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix", "a suffix (insert mode)");
    /* echo: completions only; with logprobs it asks for the prompt's */
    is_int(parse(C, "{\"prompt\":[[4,5,6]],\"echo\":true,\"logprobs\":1}", &req), 0,
           "echo with logprobs and a batch of one prompt of ids parse");
    ok(req.echo && req.params.prompt_logprobs && req.n_prompt_ids == 3 && req.prompt_ids[2] == 6,
       "echo, the prompt's logprobs asked for, the batch's one prompt");
    dsv4_api_request_free(&req);
    is_int(parse(C, "{\"prompt\":\"x\",\"echo\":true}", &req), 0, "echo alone parses");
    ok(req.echo && !req.params.prompt_logprobs, "echo without logprobs scores nothing");
    dsv4_api_request_free(&req);
    is_int(parse(G, "{\"input_ids\":[1,2],\"input_logprobs\":true}", &req), 0,
           "/generate input_logprobs parses");
    ok(req.params.prompt_logprobs && !req.params.logprobs, "and asks for the prompt's logprobs");
    dsv4_api_request_free(&req);
    refused(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"echo\":true}", "echo",
            "echo on chat");
    refused(G, "{\"input_ids\":[1],\"echo\":true}", "echo", "echo on /generate");
    refused(C, "{\"prompt\":[[1],[2]]}", "prompt", "a batch of two prompts");
    refused(CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tool_choice\":\"required\"}",
            "tool_choice", "a required tool choice");
    refused(C, "{\"prompt\":\"x\",\"repetition_penalty\":1.2}", "repetition_penalty",
            "vLLM's repetition_penalty other than 1");
    refused(C, "{\"prompt\":\"x\",\"min_p\":0.05}", "min_p", "vLLM's min_p other than 0");
    refused(C, "{\"prompt\":\"x\",\"stop\":[\"a\",3]}", "stop", "a stop array with a number");
    refused(C, "{\"prompt\":\"x\",\"stop\":\"\"}", "stop", "an empty stop string");
    is_int(parse(C, "{\"prompt\":\"x\",\"logprobs\":5,\"top_logprobs\":0}", &req), 0,
           "completions: logprobs 5");
    ok(req.params.logprobs && req.params.top_logprobs == 5,
       "completions' logprobs is the number of alternatives");
    dsv4_api_request_free(&req);
    is_int(parse(CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,"
                 "\"top_logprobs\":20}",
                 &req),
           0, "chat: logprobs with top_logprobs 20");
    ok(req.params.logprobs && req.params.top_logprobs == 20, "chat's top_logprobs is kept");
    dsv4_api_request_free(&req);
    refused(C, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs", "21 alternatives");
    refused(C, "{\"prompt\":\"x\",\"logprobs\":-1}", "logprobs", "negative logprobs");
    refused(C, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs",
            "completions' logprobs as a boolean");
    refused(C, "{\"prompt\":\"x\",\"logprobs\":1,\"top_logprobs\":3}", "top_logprobs",
            "completions' alternatives in top_logprobs");
    refused(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}",
            "top_logprobs", "chat top_logprobs without logprobs");
    refused(CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,"
            "\"top_logprobs\":21}",
            "top_logprobs", "chat top_logprobs above 20");
    refused(G, "{\"input_ids\":[1],\"logprobs\":true,\"top_logprobs\":1.5}", "top_logprobs",
            "a fractional top_logprobs");
    refused(C, "{\"prompt\":\"x\",\"model\":4}", "model", "model of the wrong type");
    refused(CHAT, "{\"messages\":[]}", "messages", "no messages");
    refused(CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].role",
            "an unknown role");
    refused(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content",
            "content of the wrong type");
    refused(G, "{\"input_ids\":\"1 2\"}", "input_ids", "input_ids as a string");

    /* unknown fields: ignored, or under [server] strict_api refused */
    const char typo[] = "{\"prompt\":\"x\",\"max_token\":5}";
    ok(parses(C, typo), "an unknown field is ignored");
    strict = true;
    ok(parses(C, full_completion) && parses(CHAT, parts_chat) && parses(G, generate_ids),
       "strict: the full completions, chat and /generate bodies above parse");
    ok(parses(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":2,\"best_of\":2,"
                    "\"top_logprobs\":2,\"logprobs\":true,\"tools\":[],\"tool_choice\":\"none\","
                    "\"response_format\":{\"type\":\"text\"},\"presence_penalty\":1,"
                    "\"frequency_penalty\":1,\"logit_bias\":{\"5\":1},\"seed\":1,\"priority\":2,"
                    "\"ignore_eos\":true,\"stream\":false,\"stop\":\"x\",\"top_k\":3,\"min_p\":0,"
                    "\"repetition_penalty\":1,\"metadata\":{},\"store\":false,\"user\":\"u\","
                    "\"parallel_tool_calls\":false,\"service_tier\":\"auto\",\"model\":\"m\"}"),
       "strict: every option dsv4d reads, judges or takes without effect parses");
    ok(parses(C, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true,\"other\":1}}"),
       "strict judges the top level only (stream_options.other passes)");
    refused(C, typo, "max_token", "strict: a misspelt option");
    is_str(err.code, "unknown_parameter", "its code is unknown_parameter");
    refused(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"prompt\":\"x\"}",
            "prompt", "strict: a completions field on chat");
    refused(G, "{\"input_ids\":[1],\"echo\":false,\"suffix\":\"\",\"messages\":[]}", "messages",
            "strict: a chat field on /generate");
    strict = false;
    return done_testing();
}
