/* workload.h: the synthetic agentic sessions of dsv4ctl repro (dsv4ctl(1) REPRO).
 *
 * A session is a system prompt shared by every session (so later sessions find it in the
 * prefix cache), a user task, then turns: the model answers, and the harness appends the
 * assistant's tool call (JSON, as an agent framework writes it) and the tool's result as
 * the next user message. Tool results grow with the turn, so contexts reach many KV pages
 * and many compressed rows (the indexer's top-k then really selects), and each turn's
 * prompt extends the last one (prefix cache and host-tier hits).
 *
 * Everything is a function of (seed, session, turn) through splitmix64, so two runs with
 * the same seed send the same bytes. Token ids are the text's bytes (0..255): the ids of
 * the byte-level tokenizer of synthetic models, and valid ids of any real vocabulary. */
#ifndef DSV4_CORE_REPRO_WORKLOAD_H
#define DSV4_CORE_REPRO_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

/* A growable array of token ids. */
typedef struct dsv4_ids {
    int32_t *v;
    size_t n, cap;
} dsv4_ids;

/* Append n ids. 0 or -ENOMEM. */
int dsv4_ids_append(dsv4_ids *ids, const int32_t *v, size_t n);
void dsv4_ids_free(dsv4_ids *ids);

/* Append the start of a session's context: the shared system prompt and the session's
 * task. 0 or -ENOMEM. */
int dsv4_workload_start(uint64_t seed, unsigned session, dsv4_ids *ids);

/* Append what follows the model's answer at turn: the tool call and its result. 0 or
 * -ENOMEM. */
int dsv4_workload_tool_turn(uint64_t seed, unsigned session, unsigned turn, dsv4_ids *ids);

#endif
