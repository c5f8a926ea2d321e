/* fuzz-model-config.c: config.json parsing (core/model/config_json.c), both the Hugging
 * Face keys and the legacy ones, on any bytes. */
#include "tests/fuzz/fuzz.h"

#include "core/model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsv4_model_config cfg;
    char err[512];
    dsv4_model_config_parse((const char *)data, size, &cfg, err, sizeof(err));
    return 0;
}
