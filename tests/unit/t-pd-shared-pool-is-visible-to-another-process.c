/* t-pd-shared-pool-is-visible-to-another-process: dsv4_kv_pool_new_shared puts every
 * buffer of the table inside one memfd mapping (what transport/local hands a peer
 * process): the same buffer table as a private pool, every buffer inside
 * [shm_base, shm_base + shm_bytes) without overlap, and a write by another process through
 * its own mapping of /proc/<pid>/fd/<shm_fd> lands in the pool. A private pool says it is
 * not shared (shm_fd -1). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/plugin/transport-harness.h"
#include "tests/tap.h"

int main(void)
{
    plan(5);
    tpool priv = tpool_new(5, 2, false, 0), shared = tpool_new(5, 2, true, 0);
    const dsv4_kv_layout *a = priv.l, *b = shared.l;
    ok(a->shm_fd == -1 && !a->shm_base && a->shm_bytes == 0, "a private pool is not shared");
    bool same = a->n_buffers == b->n_buffers;
    for (uint32_t i = 0; same && i < a->n_buffers; i++)
        same = a->buffers[i].kind == b->buffers[i].kind &&
               a->buffers[i].layer == b->buffers[i].layer &&
               a->buffers[i].block_bytes == b->buffers[i].block_bytes &&
               a->buffers[i].n_blocks == b->buffers[i].n_blocks;
    ok(same, "a shared pool has the same buffer table");
    bool inside = b->shm_fd >= 0 && b->shm_base;
    for (uint32_t i = 0; inside && i < b->n_buffers; i++) {
        const dsv4_kv_buffer *x = &b->buffers[i];
        size_t end = x->block_bytes * x->n_blocks;
        inside = x->base >= b->shm_base && x->base + end <= b->shm_base + b->shm_bytes;
        for (uint32_t j = 0; inside && j < i; j++) {
            const dsv4_kv_buffer *y = &b->buffers[j];
            inside = x->base >= y->base + y->block_bytes * y->n_blocks || y->base >= x->base + end;
        }
    }
    ok(inside, "every buffer lies inside the shared mapping, none overlapping");

    const dsv4_kv_buffer *last = &b->buffers[b->n_buffers - 1];
    size_t off = (size_t)(last->base - b->shm_base) + last->block_bytes * last->n_blocks - 8;
    pid_t parent = getpid(), child = fork();
    if (child == 0) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)parent, b->shm_fd);
        int fd = open(path, O_RDWR);
        uint8_t *p = fd < 0 ? MAP_FAILED
                            : mmap(NULL, b->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            _exit(2);
        memcpy(p + off, "written!", 8);
        _exit(0);
    }
    int status = -1;
    waitpid(child, &status, 0);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "another process maps the pool");
    ok(memcmp(b->shm_base + off, "written!", 8) == 0,
       "and its write to the last byte of the last buffer lands in the pool");
    tpool_free(&priv);
    tpool_free(&shared);
    return done_testing();
}
