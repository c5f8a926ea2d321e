/* engine_priv.h: the engine's private state, shared by engine.c (sequences and steps)
 * and prefix.c (what the prefix cache needs: page lists, snapshots, adoption). */
#ifndef DSV4_CORE_ENGINE_PRIV_H
#define DSV4_CORE_ENGINE_PRIV_H

#include "core/engine/engine.h"
#include "core/engine/forward.h"

typedef struct dsv4_fwd_cuda dsv4_fwd_cuda; /* forward_cuda.h, built with CUDA only */

typedef struct dsv4_eseq {
    bool live;
    uint32_t slot;
    uint32_t len; /* tokens in its KV */
    uint32_t *pages;
    uint32_t n_pages, cap_pages;
} dsv4_eseq;

struct dsv4_engine {
    const dsv4_model *model;
    dsv4_engine_conf conf;
    dsv4_threads *threads;
    dsv4_kv_pool *pool;
    dsv4_backend backend; /* CPU or CUDA */
    dsv4_fwd *fwd;        /* the CPU forward, or */
    dsv4_fwd_cuda *cfwd;  /* the CUDA one (NULL in a build without CUDA) */
    const dsv4_plugin_desc *ik_desc;
    void *ik_conf; /* owned when the caller gave none */
    void *ik_state;
    dsv4_eseq *seqs; /* [n_slots], the sequence id is the index */
    /* step building, sized once */
    dsv4_fwd_seq *step;   /* [n_slots] */
    uint32_t *step_of;    /* [n_slots] which request entry each step entry serves */
    uint32_t *done;       /* [n_slots] tokens of each request entry already run */
    float **lptr;         /* [step_tokens] */
    const int32_t **tokp; /* [n_slots] decode tokens */
    uint32_t *ones;       /* [n_slots] = 1 */
    float **dlog;         /* [n_slots] decode outputs */

    dsv4_fwd_sample *dsamp; /* [n_slots] decode tokens chosen on the device */
};

/* Room for n_pages entries in s's page list. 0 or -ENOMEM. */
int dsv4_eseq_reserve(dsv4_eseq *s, uint32_t n_pages);

#endif
