/* fuzz_idx.c - the IDX parser (rt_data.c), plain and gzipped (the parser
 * inflates when the part starts with the gzip magic): the input as
 * features and as features + labels. */
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rt_data_part x = {.role = RT_ROLE_FEATURES, .format = RT_FMT_IDX, .normalize = 1};
    rt_data_part xy[2] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_IDX},
                          {.role = RT_ROLE_LABELS, .format = RT_FMT_IDX}};
    fuzz_data_parse(&x, 1, data, size);
    fuzz_data_parse(xy, 2, data, size);
    return 0;
}
