/* workload.c: the text of repro's synthetic agentic sessions (workload.h). */
#include "config.h"

#include "core/repro/workload.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsv4_ids_append(dsv4_ids *ids, const int32_t *v, size_t n)
{
    if (ids->n + n > ids->cap) {
        size_t cap = ids->cap ? ids->cap : 1024;
        while (cap < ids->n + n)
            cap *= 2;
        int32_t *p = realloc(ids->v, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        ids->v = p;
        ids->cap = cap;
    }
    memcpy(ids->v + ids->n, v, n * sizeof(*v));
    ids->n += n;
    return 0;
}

void dsv4_ids_free(dsv4_ids *ids)
{
    free(ids->v);
    *ids = (dsv4_ids){0};
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The generator of one piece of text: a distinct stream per (seed, session, turn, kind). */
static uint64_t stream(uint64_t seed, unsigned session, unsigned turn, unsigned kind)
{
    uint64_t s = seed ^ ((uint64_t)session << 32) ^ ((uint64_t)turn << 8) ^ kind;
    splitmix64(&s);
    return s;
}

static unsigned pick(uint64_t *s, unsigned n)
{
    return (unsigned)(splitmix64(s) % n);
}

/* Append printf-formatted text as byte ids. 0 or -ENOMEM. */
__attribute__((format(printf, 2, 3))) static int put(dsv4_ids *ids, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(buf))
        return -ENOMEM;
    int32_t v[sizeof(buf)];
    for (int i = 0; i < n; i++)
        v[i] = (unsigned char)buf[i];
    return dsv4_ids_append(ids, v, (size_t)n);
}

static const char *const tools[] = {"read_file", "grep", "run_tests", "list_dir", "apply_patch"};
static const char *const dirs[] = {"core/serve",    "core/engine", "kernels/cpu",
                                   "plugins/sched", "core/http",   "tests/unit"};
static const char *const words[] = {"page",  "batch", "index", "score", "window", "carry",
                                    "lease", "fence", "layer", "token", "slot",   "chunk"};

int dsv4_workload_start(uint64_t seed, unsigned session, dsv4_ids *ids)
{
    int rc = put(ids, "<system>You are a coding agent working in a C repository. Call one tool "
                      "per turn and answer with JSON only. Tools:\n");
    for (size_t i = 0; rc == 0 && i < sizeof(tools) / sizeof(*tools); i++)
        rc = put(ids,
                 "{\"type\":\"function\",\"function\":{\"name\":\"%s\",\"parameters\":{\"type\":"
                 "\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"pattern\":{\"type\":"
                 "\"string\"}},\"required\":[\"path\"]}}}\n",
                 tools[i]);
    if (rc == 0)
        rc = put(ids, "</system>\n");
    uint64_t s = stream(seed, session, 0, 1);
    if (rc == 0)
        rc = put(ids,
                 "<user>Session %u: the %s %s in %s/%s_%u.c is wrong when the %s is full; "
                 "find the cause and fix it.</user>\n",
                 session, words[pick(&s, 12)], words[pick(&s, 12)], dirs[pick(&s, 6)],
                 words[pick(&s, 12)], pick(&s, 100), words[pick(&s, 12)]);
    return rc;
}

int dsv4_workload_tool_turn(uint64_t seed, unsigned session, unsigned turn, dsv4_ids *ids)
{
    uint64_t s = stream(seed, session, turn, 2);
    const char *tool = tools[pick(&s, 5)];
    const char *dir = dirs[pick(&s, 6)];
    unsigned file = pick(&s, 100), line0 = 1 + pick(&s, 400);
    int rc = put(ids,
                 "\n<assistant>{\"tool_calls\":[{\"id\":\"call_%u_%u\",\"type\":\"function\","
                 "\"function\":{\"name\":\"%s\",\"arguments\":\"{\\\"path\\\":\\\"%s/%s_%u.c\\\","
                 "\\\"pattern\\\":\\\"%s\\\"}\"}}]}</assistant>\n<tool id=\"call_%u_%u\">\n",
                 session, turn, tool, dir, words[pick(&s, 12)], file, words[pick(&s, 12)], session,
                 turn);
    /* results grow with the turn: later prompts span more pages and compressed rows */
    unsigned lines = 6 + 4 * turn + pick(&s, 6);
    for (unsigned i = 0; rc == 0 && i < lines; i++)
        rc = put(ids, "%4u: static int %s_%s_%x(struct %s *p) { return p->%s[%u] + %u; }\n",
                 line0 + i, words[pick(&s, 12)], words[pick(&s, 12)], pick(&s, 4096),
                 words[pick(&s, 12)], words[pick(&s, 12)], pick(&s, 64), pick(&s, 1000));
    if (rc == 0)
        rc = put(ids, "</tool>\n<user>Continue.</user>\n");
    return rc;
}
