/* test_mirror.c - the enums and tables mirrored on both sides of the wire
 * against the .proto's enums, as protoc-c describes them. _Static_assert
 * (common/rt_mirror.c, server/rpc/rt_mirror.c) catches a renumbering; this
 * catches a value the .proto gains that a mirror does not have, and checks
 * the dtype tables (sizes, names) the client and the engine keep apart. */
#include <ctype.h>
#include <string.h>

#include "itest_unit.h"
#include "rt_engine.h"
#include "rtrain.pb-c.h"
#include "rtrain/rtrain.h"

static void test_dtype_tables(void)
{
    const ProtobufCEnumDescriptor *e = &rtrain__v1__dtype__descriptor;
    int named = 0;
    for (unsigned i = 0; i < e->n_values; i++) {
        int v = e->values[i].value;
        if (v == RTRAIN__V1__DTYPE__DTYPE_UNSPECIFIED)
            continue;
        named++;
        size_t cs = rt_client_dtype_size((rt_client_dtype)v);
        CHECK(cs > 0, "client has no size for dtype %s", e->values[i].name);
        CHECK(cs == rt_dtype_size((rt_dtype)v), "dtype %s: client %zu bytes, engine %zu",
              e->values[i].name, cs, rt_dtype_size((rt_dtype)v));
        char lower[16];
        size_t k = 0;
        for (const char *p = e->values[i].name; *p && k + 1 < sizeof lower; p++)
            lower[k++] = (char)tolower((unsigned char)*p);
        lower[k] = 0;
        CHECK(!strcmp(rt_client_dtype_name((rt_client_dtype)v), lower), "dtype %s named %s",
              e->values[i].name, rt_client_dtype_name((rt_client_dtype)v));
    }
    CHECK(named == RT_DTYPE_U8, "the .proto has %d dtypes, the client %d", named, RT_DTYPE_U8);
    CHECK(rt_client_dtype_size((rt_client_dtype)0) == 0 && rt_dtype_size((rt_dtype)0) == 0,
          "unspecified dtype has no size");
}

static void test_enum_counts(void)
{
    /* The daemon's rt_data_role/rt_data_format are tied to the client's
     * through the .proto values (both _Static_assert'ed), so counting
     * against the client's covers both. */
    CHECK(rtrain__v1__data_role__descriptor.n_values == RT_ROLE_SAMPLE_WEIGHTS + 1,
          "DataRole has %u values", rtrain__v1__data_role__descriptor.n_values);
    CHECK(rtrain__v1__data_format__descriptor.n_values == RT_FORMAT_TFRECORD + 1,
          "DataFormat has %u values", rtrain__v1__data_format__descriptor.n_values);
    CHECK(rtrain__v1__initializer__descriptor.n_values == RT_INIT_HE_UNIFORM + 1,
          "Initializer has %u values", rtrain__v1__initializer__descriptor.n_values);
}

int main(void)
{
    RUN(test_dtype_tables);
    RUN(test_enum_counts);
    return itest_summary();
}
