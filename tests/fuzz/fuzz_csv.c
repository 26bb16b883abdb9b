/* fuzz_csv.c - the CSV parser (rt_data.c), read the ways an upload can ask
 * for: features and labels in one part (last column, with a header line;
 * first column, without), features only, features + labels as two CSV
 * parts, and features and labels streamed to the spool. */
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rt_data_part both_last = {.role = RT_ROLE_BOTH, .format = RT_FMT_CSV,
                              .label_column = -1, .csv_header = 1};
    rt_data_part both_first = {.role = RT_ROLE_BOTH, .format = RT_FMT_CSV,
                               .label_column = 0};
    rt_data_part two[2] = {{.role = RT_ROLE_FEATURES, .format = RT_FMT_CSV},
                           {.role = RT_ROLE_LABELS, .format = RT_FMT_CSV}};
    fuzz_data_parse(&both_last, 1, data, size);
    fuzz_data_parse(&both_first, 1, data, size);
    fuzz_data_parse(two, 2, data, size);
    rt_data_part both_stream = {.role = RT_ROLE_BOTH, .format = RT_FMT_CSV,
                                .label_column = -1, .storage = RT_STORAGE_STREAM};
    fuzz_data_parse(&both_stream, 1, data, size);
    return 0;
}
