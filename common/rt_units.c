/* rt_units.c - numbers with units on command lines (rt_units.h). */
#include "rt_units.h"

#include <errno.h>
#include <stdlib.h>
#include <strings.h>

/* A number with an optional suffix from table (case-insensitive); the
 * suffix's multiplier applies. */
typedef struct unit {
    const char *name;
    double mul;
} unit;

static int parse_with_units(const char *s, const unit *u, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0 || v != v)
        return -1;
    while (*end == ' ')
        end++;
    if (!*end) {
        *out = v * u[0].mul; /* the first entry is the bare number's unit */
        return 0;
    }
    for (; u->name; u++)
        if (u->name[0] && strcasecmp(end, u->name) == 0) {
            *out = v * u->mul;
            return 0;
        }
    return -1;
}

int rt_parse_duration_us(const char *s, uint64_t *us)
{
    static const unit u[] = {{"", 1}, {"us", 1}, {"ms", 1e3}, {"s", 1e6}, {NULL, 0}};
    double v;
    if (parse_with_units(s, u, &v) < 0 || v > 3600e6)
        return -1;
    *us = (uint64_t)(v + 0.5);
    return 0;
}

int rt_parse_rate_Bps(const char *s, uint64_t *Bps)
{
    static const unit u[] = {
        {"", 1},          {"B", 1},          {"kB", 1e3},       {"MB", 1e6},       {"GB", 1e9},
        {"bit", 1.0 / 8}, {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8}, {NULL, 0}};
    double v;
    if (parse_with_units(s, u, &v) < 0 || v < 1 || v > 1e12)
        return -1;
    *Bps = (uint64_t)(v + 0.5);
    return 0;
}
