/* checkpoint.h: the safetensors files of one checkpoint folder, looked up by tensor name.
 *
 * A folder holds either model.safetensors or model.safetensors.index.json, whose
 * weight_map names the shard file of every tensor (shards are plain file names in the same
 * folder). Opening checks that every mapped tensor is really in its shard. The checkpoint
 * owns its files; tensors stay valid until dsv4_ckpt_close(). */
#ifndef DSV4_CORE_MODEL_CHECKPOINT_H
#define DSV4_CORE_MODEL_CHECKPOINT_H

#include <stddef.h>

#include "core/model/safetensors.h"

typedef struct dsv4_ckpt dsv4_ckpt;

/* NULL on failure with the reason in err. */
dsv4_ckpt *dsv4_ckpt_open(const char *dir, char *err, size_t errlen);
void dsv4_ckpt_close(dsv4_ckpt *c);
/* The tensor of that name and the file holding it, or NULL. */
const dsv4_st_tensor *dsv4_ckpt_find(const dsv4_ckpt *c, const char *name,
                                     const dsv4_st_file **file_p);

#endif
