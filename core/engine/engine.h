/* engine.h: the inference engine API (no server yet): sequences with paged KV, chunked
 * prefill of a batch, batched decode steps, logits out.
 *
 * The engine owns the forward workspace, the thread pool, the KV pool and the indexk
 * plugin's state; the model and the plugin descriptor (hence the registry that loaded it)
 * belong to the caller and must outlive the engine. One thread drives an engine.
 */
#ifndef DSV4_CORE_ENGINE_H
#define DSV4_CORE_ENGINE_H

#include <dsv4d/plugin.h>

#include "core/engine/kvpool.h"
#include "core/engine/sample.h"
#include "core/model/model.h"

typedef struct dsv4_engine dsv4_engine;

/* Where the forward runs (core/engine/backend.c). The zero value is the CPU, so an engine
 * configured in code stays on the reference backend unless it asks for CUDA. */
typedef enum dsv4_backend {
    DSV4_BACKEND_CPU = 0,
    DSV4_BACKEND_CUDA, /* the CUDA forward and a device KV pool; an error without a device */
    DSV4_BACKEND_AUTO, /* cuda when built with CUDA, a device answers and no selected plugin
                          refuses device = cuda (its check hook); else cpu */
} dsv4_backend;

/* [core] device as a backend request. */
dsv4_backend dsv4_backend_of_device(dsv4_device device);

typedef struct dsv4_engine_conf {
    uint32_t threads;               /* [core] threads; 0 = one per core */
    dsv4_kv_dtype kv_dtype;         /* [model] kv_dtype: f32 or bf16 */
    uint32_t n_pages;               /* KV pages in the pool */
    uint32_t n_slots;               /* sequences with KV state at once */
    uint32_t page_tokens;           /* source tokens per page; 0 = 256 */
    uint32_t step_tokens;           /* per-step token budget (the prefill chunk) */
    const dsv4_plugin_desc *indexk; /* the indexk plugin (family DSV4_FAMILY_INDEXK) */
    const void *indexk_conf;        /* its config struct; NULL = its schema defaults */
    const dsv4_host *host;          /* handed to the plugin; NULL = dsv4_host_default() */
    bool kv_shared;       /* pool in shared memory (a PD decode server over transport/local) */
    dsv4_backend backend; /* [core] device (dsv4_backend_of_device) */
    int32_t cuda_device;  /* [core] cuda_device: the ordinal; -1 = the first */
    bool fast_kernels;    /* [core] deterministic = false: cuBLAS picks the GEMM kernels,
                             so CUDA logits may depend on the batch */
    bool eager;           /* [core] cuda_graphs = false: every CUDA forward pass launched
                             kernel by kernel */
    /* For AUTO: the whole selection and the selected plugins ([DSV4_FAMILY_COUNT]), whose
     * check hooks are asked whether device = cuda suits them (plugins NULL = the indexk
     * plugin alone; selection NULL = each plugin with its schema defaults). */
    const dsv4_selection *selection;
    const dsv4_plugin_desc *const *plugins;
} dsv4_engine_conf;

typedef enum dsv4_logits_mode {
    DSV4_LOGITS_NONE, /* no logits */
    DSV4_LOGITS_LAST, /* vocab floats for the last token of each sequence */
    DSV4_LOGITS_ALL,  /* len * vocab floats, one row per token */
} dsv4_logits_mode;

/* NULL with the reason in err (bad geometry, plugin init failure, out of memory). */
dsv4_engine *dsv4_engine_new(const dsv4_model *model, const dsv4_engine_conf *conf, char *err,
                             size_t errlen);
void dsv4_engine_free(dsv4_engine *eng);

/* A new empty sequence (a state slot is reserved). -ENOSPC when every slot is taken. */
int dsv4_engine_seq_new(dsv4_engine *eng, uint32_t *seq_p);
/* Give the sequence's pages and state slot back to the pool. */
void dsv4_engine_seq_free(dsv4_engine *eng, uint32_t seq);
/* Give a sequence that is empty, or holds only whole pages adopted from the prefix cache
 * (dsv4_engine_seq_adopt), pages up to its first `tokens` tokens without running the
 * forward, and make that its length: a PD transfer writes the new pages and the state
 * slot (the decode role, core/serve/pd_decode.c), and the sequence must not run before it
 * landed. 0, -EINVAL (longer than `tokens` or not a whole number of pages, over the
 * context) or -ENOSPC (the pages taken so far stay with the sequence: free it). */
int dsv4_engine_seq_reserve(dsv4_engine *eng, uint32_t seq, uint32_t tokens);
/* Tokens in the sequence's KV so far. */
uint32_t dsv4_engine_seq_len(const dsv4_engine *eng, uint32_t seq);
/* The sequence's state slot and its pages in order (n_pages_p gets the count); NULL for a
 * sequence that does not exist. Valid until the next call that changes the sequence. */
const uint32_t *dsv4_engine_seq_pages(const dsv4_engine *eng, uint32_t seq, uint32_t *slot_p,
                                      uint32_t *n_pages_p);

/* Append lens[i] tokens to each sequence seqs[i], running as many steps as the per-step
 * budget needs (a step takes tokens from the sequences in order, splitting a sequence
 * across steps where the budget ends). logits[i] receives what mode asks for. 0, or
 * -EINVAL for a bad or repeated sequence, a token id outside the vocabulary or a context
 * overflow (checked before anything runs), -ENOSPC when the pool has no page left, or
 * the indexk plugin's status. After -ENOSPC or a plugin failure a sequence's KV may be
 * partly extended: free it. */
int dsv4_engine_prefill(dsv4_engine *eng, size_t n, const uint32_t *seqs,
                        const int32_t *const *tokens, const uint32_t *lens, dsv4_logits_mode mode,
                        float *const *logits);
/* dsv4_engine_prefill with each sequence's own mode: sequence i's logits[i] receives what
 * modes[i] asks for (a serving batch where one request scores its prompt). With scores
 * (NULL = none; only where dsv4_engine_samples, else -ENOTSUP), the rows of sequence i's
 * tokens that scores[i] (NULL = none; lens[i] entries) asks for are scored on the device,
 * only their log-probabilities coming back (dsv4_score_req). */
int dsv4_engine_prefill_each(dsv4_engine *eng, size_t n, const uint32_t *seqs,
                             const int32_t *const *tokens, const uint32_t *lens,
                             const dsv4_logits_mode *modes, float *const *logits,
                             const dsv4_score_req *const *scores);
/* One decode step for n sequences: token[i] is appended to seqs[i] and its next-token
 * logits go to logits + i * vocab. Same errors as prefill. */
int dsv4_engine_decode(dsv4_engine *eng, size_t n, const uint32_t *seqs, const int32_t *tokens,
                       float *logits);
/* Whether the engine chooses next tokens on its device (dsv4_engine_decode_sample): true on
 * the CUDA backend. On the CPU the caller samples the logits itself (dsv4_sample). */
bool dsv4_engine_samples(const dsv4_engine *eng);
/* One decode step as dsv4_engine_decode, but out[i] receives seqs[i]'s next token, chosen
 * on the device as dsv4_sample would choose it from the step's logits edited by
 * reqs[i].edits, with reqs[i].params and its draw (dsv4_sample_draw of the request's rng,
 * so the rng advances as on the CPU), and the log-probabilities reqs[i] asks for; only
 * those come back to the host. Same errors as decode, -EINVAL for an edit's token outside
 * the vocabulary or top_logprobs past DSV4_TOP_LOGPROBS_MAX, and -ENOTSUP where
 * dsv4_engine_samples is false. */
int dsv4_engine_decode_sample(dsv4_engine *eng, size_t n, const uint32_t *seqs,
                              const int32_t *tokens, const dsv4_choice_req *reqs, dsv4_choice *out);

/* The forward passes (prefill and decode steps) so far by how their layers ran on the
 * CUDA backend: replayed from a captured CUDA graph, recorded into one (a step shape's
 * second coming; then launched from it) and the time the recording took, or launched
 * kernel by kernel (a shape's first coming, and everything where graphs cannot be used).
 * All zero on the CPU backend. */
typedef struct dsv4_engine_graph_stats {
    uint64_t replayed, captured, direct, capture_ns;
} dsv4_engine_graph_stats;
void dsv4_engine_graph_stats_get(const dsv4_engine *eng, dsv4_engine_graph_stats *st);

const dsv4_kv_pool *dsv4_engine_kv(const dsv4_engine *eng);
/* The backend the engine runs on (CPU or CUDA, never AUTO). */
dsv4_backend dsv4_engine_backend(const dsv4_engine *eng);
/* Make the engine's CUDA device current on the calling thread (CUDA keeps one per thread):
 * a thread other than the creator's calls this before it uses the engine. 0 (also on the
 * CPU backend), or the CUDA status. */
int dsv4_engine_bind_thread(const dsv4_engine *eng);
uint32_t dsv4_engine_vocab(const dsv4_engine *eng);

/* For the prefix cache (prefix.c; a sequence's pages come from dsv4_engine_seq_pages). A
 * cached prefix is whole pages plus a snapshot of the per-sequence state (every state
 * buffer: window ring, compressor carries) at its end. */

/* The KV pool, writable, for the host tier (core/hostcache/tier.h): it installs its load
 * fence on the pool and copies pages in and out. Everything else reads dsv4_engine_kv. */
dsv4_kv_pool *dsv4_engine_kv_pool(dsv4_engine *eng);
/* A page for a cached page loaded back from host (one reference, the cache's). -ENOSPC. */
int dsv4_engine_page_alloc(dsv4_engine *eng, uint32_t *page_p);
/* Page references, for pages a cache keeps beyond the sequences that wrote them. */
void dsv4_engine_page_ref(dsv4_engine *eng, uint32_t page);
void dsv4_engine_page_unref(dsv4_engine *eng, uint32_t page);
/* A spare state slot to hold a snapshot (it counts against n_slots). -ENOSPC. */
int dsv4_engine_slot_alloc(dsv4_engine *eng, uint32_t *slot_p);
void dsv4_engine_slot_free(dsv4_engine *eng, uint32_t slot);
/* Copy the sequence's state into the spare slot. 0, -EINVAL, or the KV fence's failure. */
int dsv4_engine_seq_snapshot(dsv4_engine *eng, uint32_t seq, uint32_t slot);
/* Start an empty sequence from n_pages full pages (each gains a reference) and the state
 * snapshot in slot (copied): its length becomes n_pages * page_tokens. With slot
 * DSV4_ENGINE_NO_SLOT nothing is copied: the caller fills the sequence's own slot (the
 * host tier loads a snapshot there). 0, -EINVAL (not empty, bad slot), -ENOMEM, or the
 * KV fence's failure. */
#define DSV4_ENGINE_NO_SLOT UINT32_MAX
int dsv4_engine_seq_adopt(dsv4_engine *eng, uint32_t seq, const uint32_t *pages, uint32_t n_pages,
                          uint32_t slot);

#endif
