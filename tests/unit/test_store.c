/* test_store.c - the daemon's dataset store, linked directly (server/data):
 * dedup by key, lookups, reference counts, byte accounting (converted
 * labels included) and LRU eviction past the cap, which never drops a
 * dataset a call still holds. */
#include <stdio.h>
#include <string.h>

#include "itest_unit.h"
#include "rt_data.h"

static int ds_refs(rt_dataset *d) { return __atomic_load_n(&d->refs, __ATOMIC_ACQUIRE); }

/* n rows of "a,b,label" (integer labels), parsed as one CSV part; keyed by
 * tag. 12 bytes a row: two f32 features and one label. */
static rt_dataset *make_ds(int n, int tag)
{
    char csv[4096];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(csv + len, sizeof csv - len, "%d.5,%d,%d\n", i, tag, i % 3);
    rt_data_part p = {.role = RT_ROLE_BOTH, .format = RT_FMT_CSV, .length = len,
                      .label_column = -1};
    rt_dataset *ds = NULL;
    char err[256];
    int rc = rt_data_parse(&p, 1, (const uint8_t *)csv, len, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == 0 && ds, "parse: %d %s", rc, rc ? err : "");
    if (ds) {
        uint8_t key[16] = {0};
        key[0] = (uint8_t)tag;
        rt_dataset_set_key(ds, key);
    }
    return ds;
}

static void test_put_dedup_find(void)
{
    rt_data_store *s = rt_data_store_create(0);
    rt_dataset *a = make_ds(10, 1), *kept = NULL;
    int dedup = -1;
    CHECK(rt_dataset_bytes(a) == 120, "10 rows: %llu bytes", (unsigned long long)rt_dataset_bytes(a));
    rt_data_store_put(s, a, &kept, &dedup);
    CHECK(kept == a && dedup == 0 && ds_refs(a) == 2, "put: store + caller = %d", ds_refs(a));
    CHECK(rt_data_store_count(s) == 1 && rt_data_store_bytes(s) == 120, "accounting");

    /* The same content again (same key): the store keeps its own. */
    rt_dataset *again = make_ds(10, 1), *kept2 = NULL;
    rt_data_store_put(s, again, &kept2, &dedup);
    CHECK(kept2 == a && dedup == 1 && ds_refs(a) == 3, "dedup: %d", ds_refs(a));
    CHECK(rt_data_store_count(s) == 1 && rt_data_store_bytes(s) == 120, "dedup adds nothing");
    rt_dataset_release(kept2);

    uint8_t k1[16] = {1}, k9[16] = {9};
    rt_dataset *f = rt_data_store_find_key(s, k1);
    CHECK(f == a && ds_refs(a) == 3, "find_key retains");
    rt_dataset_release(f);
    f = rt_data_store_find_id(s, a->id);
    CHECK(f == a && !strncmp(a->id, "d-", 2), "find_id %s", a->id);
    rt_dataset_release(f);
    CHECK(rt_data_store_find_key(s, k9) == NULL, "unknown key");
    CHECK(rt_data_store_find_id(s, "d-none") == NULL, "unknown id");

    /* A program needing the other label dtype converts and caches a copy:
     * the dataset grows and the store counts it. */
    rt_dtype other = a->y_dtype == RT_I32 ? RT_F32 : RT_I32;
    const void *y = NULL;
    char err[128];
    CHECK(rt_dataset_labels_as(a, other, &y, err, sizeof err) == 0 && y, "convert: %s", err);
    CHECK(rt_dataset_bytes(a) == 160, "converted labels: %llu",
          (unsigned long long)rt_dataset_bytes(a));
    CHECK(rt_data_store_bytes(s) == 160, "store after conversion: %llu",
          (unsigned long long)rt_data_store_bytes(s));

    rt_dataset_release(a);
    CHECK(ds_refs(a) == 1, "only the store: %d", ds_refs(a));
    rt_data_store_destroy(s); /* frees a (ASan: no leak) */
    rt_data_store_destroy(NULL);
    rt_dataset_release(NULL);
}

static void test_eviction(void)
{
    /* Room for two 120-byte datasets, not three. */
    rt_data_store *s = rt_data_store_create(300);
    rt_dataset *d[6], *kept;
    int dedup;
    for (int i = 1; i <= 5; i++)
        d[i] = make_ds(10, i);

    rt_data_store_put(s, d[1], &kept, &dedup);
    rt_data_store_put(s, d[2], &kept, &dedup);
    CHECK(rt_data_store_count(s) == 2 && rt_data_store_bytes(s) == 240, "two fit");
    /* d1 is the least recently used, but a call holds it; d2 is free. */
    rt_dataset *f = rt_data_store_find_id(s, d[2]->id); /* touch d2: d1 is LRU */
    rt_dataset_release(f);
    rt_dataset_release(d[2]);
    char id1[40], id2[40];
    snprintf(id1, sizeof id1, "%s", d[1]->id);
    snprintf(id2, sizeof id2, "%s", d[2]->id);
    rt_data_store_put(s, d[3], &kept, &dedup);
    CHECK(rt_data_store_count(s) == 2 && rt_data_store_bytes(s) == 240,
          "one evicted: %zu, %llu", rt_data_store_count(s),
          (unsigned long long)rt_data_store_bytes(s));
    f = rt_data_store_find_id(s, id2);
    CHECK(f == NULL, "d2 (not in use) evicted, though d1 is older");
    rt_dataset_release(f);
    f = rt_data_store_find_id(s, id1);
    CHECK(f == d[1], "d1 (held by a call) kept");
    rt_dataset_release(f);

    /* Now release d1: it is the LRU and free, so d4 evicts it. */
    rt_dataset_release(d[1]);
    f = rt_data_store_find_id(s, d[3]->id);
    rt_dataset_release(f);
    rt_data_store_put(s, d[4], &kept, &dedup);
    f = rt_data_store_find_id(s, id1);
    CHECK(f == NULL && rt_data_store_count(s) == 2, "d1 evicted once released");
    rt_dataset_release(f);

    /* Everything stored is in use (d3, d4, d5 held): the store goes over
     * its cap rather than drop data a call is using. */
    rt_data_store_put(s, d[5], &kept, &dedup);
    CHECK(rt_data_store_count(s) == 3 && rt_data_store_bytes(s) == 360,
          "over the cap while all are held: %zu %llu", rt_data_store_count(s),
          (unsigned long long)rt_data_store_bytes(s));
    /* An evicted dataset a call holds stays valid for that call. */
    rt_dataset_release(d[3]);
    rt_dataset *d6 = make_ds(10, 6);
    rt_data_store_put(s, d6, &kept, &dedup);
    CHECK(rt_data_store_find_key(s, (uint8_t[16]){3}) == NULL, "d3 evicted after release");
    CHECK(rt_data_store_count(s) == 3, "count %zu", rt_data_store_count(s));

    rt_dataset_release(d[4]);
    rt_dataset_release(d[5]);
    rt_dataset_release(d6);
    rt_data_store_destroy(s);
}

int main(void)
{
    RUN(test_put_dedup_find);
    RUN(test_eviction);
    return itest_summary();
}
