/* fuzz_idx.c - the IDX parser (rt_data.c), plain and gzipped (the parser
 * inflates when the part starts with the gzip magic): the input as
 * features and as features + labels, in memory, and as features streamed
 * (inflated into the spool chunk by chunk). */
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rt_data_part x = {.role = RT_ROLE_FEATURES, .format = RT_FMT_IDX, .normalize = 1};
    rt_data_part xy[2] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_IDX},
                          {.role = RT_ROLE_LABELS, .format = RT_FMT_IDX}};
    fuzz_data_parse(&x, 1, data, size);
    fuzz_data_parse(xy, 2, data, size);
    rt_data_part xs = {.role = RT_ROLE_FEATURES, .format = RT_FMT_IDX, .normalize = 1,
                       .storage = RT_STORAGE_STREAM};
    fuzz_data_parse(&xs, 1, data, size);
    return 0;
}
