/* rt_units.h - numbers with units, as command lines take them: the
 * relay's and the CLI's --rtt, --jitter and --bandwidth (one parser for
 * both). In rt_base: no gRPC. */
#ifndef RTRAIN_UNITS_H
#define RTRAIN_UNITS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "2ms", "500us", "0.25s", "1500" (us), up to an hour. Returns 0 or -1. */
int rt_parse_duration_us(const char *s, uint64_t *us);
/* "100mbit", "1gbit", "10MB" (per second), "1500000" (bytes/s); k/m/g are
 * powers of 1000. Returns 0 or -1. */
int rt_parse_rate_Bps(const char *s, uint64_t *Bps);

#ifdef __cplusplus
}
#endif
#endif
