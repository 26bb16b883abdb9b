/* fuzz_npy.c - the NPY parser (rt_data.c): the input as features (u8
 * normalised or not) and as features + labels, and as features streamed
 * to the spool. */
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rt_data_part x = {.role = RT_ROLE_FEATURES, .format = RT_FMT_NPY, .normalize = 1};
    rt_data_part xy[2] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_NPY},
                          {.role = RT_ROLE_LABELS, .format = RT_FMT_NPY}};
    fuzz_data_parse(&x, 1, data, size);
    fuzz_data_parse(xy, 2, data, size);
    rt_data_part xs = {.role = RT_ROLE_FEATURES, .format = RT_FMT_NPY, .normalize = 1,
                       .storage = RT_STORAGE_STREAM};
    fuzz_data_parse(&xs, 1, data, size);
    return 0;
}
