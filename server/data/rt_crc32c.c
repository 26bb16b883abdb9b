/* rt_crc32c.c - CRC32C: SSE4.2 instruction with a slicing-by-8 fallback. */
#include "rt_crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t tab[8][256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (POLY & (0u - (c & 1)));
        tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            tab[t][i] = (tab[t - 1][i] >> 8) ^ tab[0][tab[t - 1][i] & 0xff];
}

uint32_t rt_crc32c_sw(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&tab_once, tab_init);
    const uint8_t *b = p;
    uint32_t c = ~crc;
    while (n && ((uintptr_t)b & 7)) {
        c = (c >> 8) ^ tab[0][(c ^ *b++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        w ^= c; /* little-endian: the low 4 bytes take the running crc */
        c = tab[7][w & 0xff] ^ tab[6][(w >> 8) & 0xff] ^ tab[5][(w >> 16) & 0xff] ^
            tab[4][(w >> 24) & 0xff] ^ tab[3][(w >> 32) & 0xff] ^ tab[2][(w >> 40) & 0xff] ^
            tab[1][(w >> 48) & 0xff] ^ tab[0][w >> 56];
        b += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ tab[0][(c ^ *b++) & 0xff];
    return ~c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) uint32_t rt_crc32c_hw(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t c = ~crc;
    while (n && ((uintptr_t)b & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *b++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c = _mm_crc32_u64(c, w);
        b += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *b++);
    return ~(uint32_t)c;
}

int rt_crc32c_has_hw(void)
{
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}
#else
uint32_t rt_crc32c_hw(uint32_t crc, const void *p, size_t n) { return rt_crc32c_sw(crc, p, n); }

int rt_crc32c_has_hw(void) { return 0; }
#endif

uint32_t rt_crc32c(uint32_t crc, const void *p, size_t n)
{
    return rt_crc32c_has_hw() ? rt_crc32c_hw(crc, p, n) : rt_crc32c_sw(crc, p, n);
}
