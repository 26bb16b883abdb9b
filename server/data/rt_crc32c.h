/*
 * rt_crc32c.h - CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum TFRecord frames carry, and TFRecord's mask over it.
 *
 * rt_crc32c picks the SSE4.2 crc32 instruction when the CPU has it (checked
 * once, at the first call) and a slicing-by-8 table otherwise; both give the
 * same value and both are callable directly so tests can compare them.
 *
 *     uint32_t c = rt_crc32c(0, buf, len);          // one shot
 *     c = rt_crc32c(rt_crc32c(0, a, na), b, nb);    // == crc of a then b
 *     uint32_t on_disk = rt_crc32c_mask(c);         // what TFRecord stores
 */
#ifndef RTRAIN_CRC32C_H
#define RTRAIN_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CRC32C of n bytes at p, continuing from crc (0 to start). p may be NULL
 * when n is 0. */
uint32_t rt_crc32c(uint32_t crc, const void *p, size_t n);
/* The portable table version. */
uint32_t rt_crc32c_sw(uint32_t crc, const void *p, size_t n);
/* The SSE4.2 version; only call it when rt_crc32c_has_hw() is 1. */
uint32_t rt_crc32c_hw(uint32_t crc, const void *p, size_t n);
/* 1 when the CPU has the SSE4.2 crc32 instruction and rt_crc32c uses it. */
int rt_crc32c_has_hw(void);

/* TFRecord stores ((crc >> 15) | (crc << 17)) + 0xa282ead8 so that a CRC of
 * data holding CRCs is not degenerate. */
static inline uint32_t rt_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
static inline uint32_t rt_crc32c_unmask(uint32_t m)
{
    uint32_t r = m - 0xa282ead8u;
    return (r >> 17) | (r << 15);
}

#ifdef __cplusplus
}
#endif
#endif
