/* itest_data.h - for tests of server/data: rt_data_parse_take over a buffer the
 * test keeps (may_take 0: the parser only reads it). Header-only. */
#ifndef RTRAIN_ITEST_DATA_H
#define RTRAIN_ITEST_DATA_H

#include "rt_data.h"

static inline int itest_parse(const rt_data_part *parts, int n_parts, const void *buf,
                              size_t len, uint64_t max_bytes, rt_dataset **out, char *err,
                              size_t errlen)
{
    uint8_t *b = (uint8_t *)buf;
    return rt_data_parse_take(parts, n_parts, &b, len, max_bytes, 0, 0, out, err, errlen);
}

#endif
