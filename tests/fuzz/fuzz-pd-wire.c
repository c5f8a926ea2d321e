/* fuzz-pd-wire.c: the PD control channel's frame reader (core/pd/wire.c). A peer that
 * does not know the secret only reaches the header checks and the MAC, so the input is
 * also sealed here: its length field is set to the bytes given and the MAC appended, which
 * takes the fuzzer past authentication into the body decoders, as an authenticated but
 * hostile peer would. A frame that opens must seal back to exactly the same bytes, and a
 * HELLO's geometry is compared with ours as the handshake does. */
#include "tests/fuzz/fuzz.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "core/pd/wire.h"

static const uint8_t key[] = "fuzz-shared-secret";

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void check_hello(const dsv4_pd_msg *m)
{
    static const uint8_t kinds[2] = {DSV4_LAYER_SLIDING, DSV4_LAYER_CSA};
    static const dsv4_pd_buf_geom bufs[2] = {{.kind = 0, .layer = 0, .block_bytes = 4096},
                                             {.kind = 0, .layer = 1, .block_bytes = 4096}};
    dsv4_pd_geom mine = {.page_tokens = 64,
                         .kv_dtype = DSV4_KV_F32,
                         .index_dim = 32,
                         .n_layers = 2,
                         .n_buffers = 2,
                         .indexk = "f32",
                         .layer_kind = kinds,
                         .buffers = bufs};
    char err[1024];
    dsv4_pd_geom_compare(&mine, &m->hello.geom, err, sizeof(err));
    dsv4_pd_geom_compare(&m->hello.geom, &mine, err, sizeof(err));
    dsv4_pd_geom_compare(&m->hello.geom, &m->hello.geom, err, sizeof(err));
}

static void open_sealed(const uint8_t *data, size_t size)
{
    uint8_t *frame = malloc(size + DSV4_PD_MAC_BYTES);
    if (!frame)
        return;
    memcpy(frame, data, size);
    uint32_t body = (uint32_t)(size - DSV4_PD_HEADER_BYTES);
    for (int i = 0; i < 4; i++)
        frame[8 + i] = (uint8_t)(body >> (8 * i));
    unsigned int mac_len = DSV4_PD_MAC_BYTES;
    HMAC(EVP_sha256(), key, sizeof(key), frame, size, frame + size, &mac_len);
    uint64_t seq = le64(frame + 16);
    dsv4_pd_msg m;
    char err[512];
    if (dsv4_pd_frame_open(key, sizeof(key), seq, frame, size + DSV4_PD_MAC_BYTES, &m, err,
                           sizeof(err)) == 0) {
        if (m.type == DSV4_PD_HELLO)
            check_hello(&m);
        uint8_t *again;
        size_t again_len;
        if (dsv4_pd_frame_seal(key, sizeof(key), seq, &m, &again, &again_len, err, sizeof(err)) !=
            0)
            dsv4_fuzz_fail("an opened %s frame does not seal (%s)", dsv4_pd_type_name(m.type), err);
        if (again_len != size + DSV4_PD_MAC_BYTES || memcmp(again, frame, again_len) != 0)
            dsv4_fuzz_fail("an opened %s frame seals to other bytes", dsv4_pd_type_name(m.type));
        free(again);
        dsv4_pd_msg_clear(&m);
    }
    free(frame);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsv4_pd_msg m;
    char err[512];
    size_t rest;
    /* As an outsider: the bytes as they are. */
    if (dsv4_pd_frame_open(key, sizeof(key), 1, data, size, &m, err, sizeof(err)) == 0)
        dsv4_pd_msg_clear(&m);
    if (size >= DSV4_PD_HEADER_BYTES) {
        dsv4_pd_frame_header(data, &rest, err, sizeof(err));
        open_sealed(data, size);
    }
    return 0;
}
