/* test_store.c - the daemon's dataset store, linked directly (server/data):
 * dedup by key, lookups, reference counts, byte accounting (converted
 * labels included), LRU eviction past the cap, which never drops a
 * dataset a call still holds, and owners: lookups, dedup and eviction stay
 * within one principal. */
#include <stdio.h>
#include <string.h>

#include "itest_unit.h"
#include "itest_data.h"

static int ds_refs(rt_dataset *d) { return __atomic_load_n(&d->refs, __ATOMIC_ACQUIRE); }

/* n rows of "a,b,label" (integer labels), parsed as one CSV part; keyed by
 * tag. 12 bytes a row: two f32 features and one label. */
static rt_dataset *make_ds_of(int n, int tag, rt_principal *owner)
{
    char csv[4096];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(csv + len, sizeof csv - len, "%d.5,%d,%d\n", i, tag, i % 3);
    rt_data_part p = {.role = RT_ROLE_BOTH, .format = RT_FMT_CSV, .length = len,
                      .label_column = -1};
    rt_dataset *ds = NULL;
    char err[256];
    int rc = itest_parse(&p, 1, (const uint8_t *)csv, len, 1 << 20, &ds, err, sizeof err);
    CHECK(rc == 0 && ds, "parse: %d %s", rc, rc ? err : "");
    if (ds) {
        uint8_t key[16] = {0};
        key[0] = (uint8_t)tag;
        CHECK(rt_dataset_set_key(ds, key) == 0, "set_key");
        if (owner) {
            char e[200];
            CHECK(rt_principal_reserve(owner, RT_Q_STORE_BYTES, rt_dataset_bytes(ds), e,
                                       sizeof e) == 0, "charge: %s", e);
            rt_dataset_set_owner(ds, owner, rt_dataset_bytes(ds));
        }
    }
    return ds;
}

static rt_dataset *make_ds(int n, int tag) { return make_ds_of(n, tag, NULL); }

static void test_put_dedup_find(void)
{
    rt_data_store *s = rt_data_store_create(0);
    rt_dataset *a = make_ds(10, 1), *kept = NULL;
    int dedup = -1;
    CHECK(rt_dataset_bytes(a) == 120, "10 rows: %llu bytes", (unsigned long long)rt_dataset_bytes(a));
    CHECK(rt_data_store_put(s, a, &kept, &dedup) == 0, "put");
    CHECK(kept == a && dedup == 0 && ds_refs(a) == 2, "put: store + caller = %d", ds_refs(a));
    CHECK(rt_data_store_count(s) == 1 && rt_data_store_bytes(s) == 120, "accounting");

    /* The same content again (same key): the store keeps its own. */
    rt_dataset *again = make_ds(10, 1), *kept2 = NULL;
    rt_data_store_put(s, again, &kept2, &dedup);
    CHECK(kept2 == a && dedup == 1 && ds_refs(a) == 3, "dedup: %d", ds_refs(a));
    CHECK(rt_data_store_count(s) == 1 && rt_data_store_bytes(s) == 120, "dedup adds nothing");
    rt_dataset_release(kept2);

    uint8_t k1[16] = {1}, k9[16] = {9};
    rt_dataset *f = rt_data_store_find_key(s, NULL, k1);
    CHECK(f == a && ds_refs(a) == 3, "find_key retains");
    rt_dataset_release(f);
    f = rt_data_store_find_id(s, NULL, a->id);
    CHECK(f == a && !strncmp(a->id, "d-", 2), "find_id %s", a->id);
    rt_dataset_release(f);
    CHECK(rt_data_store_find_key(s, NULL, k9) == NULL, "unknown key");
    CHECK(rt_data_store_find_id(s, NULL, "d-none") == NULL, "unknown id");

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
    rt_dataset *f = rt_data_store_find_id(s, NULL, d[2]->id); /* touch d2: d1 is LRU */
    rt_dataset_release(f);
    rt_dataset_release(d[2]);
    char id1[40], id2[40];
    snprintf(id1, sizeof id1, "%s", d[1]->id);
    snprintf(id2, sizeof id2, "%s", d[2]->id);
    rt_data_store_put(s, d[3], &kept, &dedup);
    CHECK(rt_data_store_count(s) == 2 && rt_data_store_bytes(s) == 240,
          "one evicted: %zu, %llu", rt_data_store_count(s),
          (unsigned long long)rt_data_store_bytes(s));
    f = rt_data_store_find_id(s, NULL, id2);
    CHECK(f == NULL, "d2 (not in use) evicted, though d1 is older");
    rt_dataset_release(f);
    f = rt_data_store_find_id(s, NULL, id1);
    CHECK(f == d[1], "d1 (held by a call) kept");
    rt_dataset_release(f);

    /* Now release d1: it is the LRU and free, so d4 evicts it. */
    rt_dataset_release(d[1]);
    f = rt_data_store_find_id(s, NULL, d[3]->id);
    rt_dataset_release(f);
    rt_data_store_put(s, d[4], &kept, &dedup);
    f = rt_data_store_find_id(s, NULL, id1);
    CHECK(f == NULL && rt_data_store_count(s) == 2, "d1 evicted once released");
    rt_dataset_release(f);

    /* Everything stored is in use (d3, d4 held): d5 is refused (and
     * released) rather than drop data a call is using. */
    CHECK(rt_data_store_put(s, d[5], &kept, &dedup) == RT_ETOOBIG && !kept,
          "full while all are held");
    CHECK(rt_data_store_count(s) == 2 && rt_data_store_bytes(s) == 240, "nothing dropped: %zu %llu",
          rt_data_store_count(s), (unsigned long long)rt_data_store_bytes(s));
    /* Once d3 is released it makes room for d6. */
    rt_dataset_release(d[3]);
    rt_dataset *d6 = make_ds(10, 6);
    CHECK(rt_data_store_put(s, d6, &kept, &dedup) == 0 && kept == d6, "d6 stored");
    CHECK(rt_data_store_find_key(s, NULL, (uint8_t[16]){3}) == NULL, "d3 evicted after release");
    CHECK(rt_data_store_count(s) == 2, "count %zu", rt_data_store_count(s));

    rt_dataset_release(d[4]);
    rt_dataset_release(d6);
    rt_data_store_destroy(s);
}

/* Two principals: neither finds nor deduplicates against the other's
 * datasets, the cap only ever drops the uploader's own, and a dataset's
 * store-bytes charge is given back when it is freed. */
static void test_owners(void)
{
    rt_principal_set *ps = rt_principal_set_create(RT_QUOTA_UNLIMITED);
    uint64_t lim[RT_Q__COUNT];
    rt_quota_unlimited(lim);
    rt_principal *alice = rt_principal_get(ps, "alice", lim), *bob = rt_principal_get(ps, "bob", lim);
    rt_data_store *s = rt_data_store_create(300);
    rt_dataset *a = make_ds_of(10, 1, alice), *kept = NULL;
    int dedup = -1;
    CHECK(rt_data_store_put(s, a, &kept, &dedup) == 0 && kept == a, "alice's");
    rt_dataset_release(kept);
    CHECK(rt_principal_used(alice, RT_Q_STORE_BYTES) == 120, "alice charged");
    uint8_t k1[16] = {1};
    CHECK(rt_data_store_find_key(s, bob, k1) == NULL, "bob does not find alice's key");
    CHECK(rt_data_store_find_id(s, bob, a->id) == NULL, "bob does not find alice's id");
    /* Bob's identical dataset is his own copy, with another random id. */
    rt_dataset *b = make_ds_of(10, 1, bob);
    CHECK(rt_data_store_put(s, b, &kept, &dedup) == 0 && kept == b && dedup == 0 &&
              strcmp(a->id, b->id) != 0,
          "bob's copy: dedup %d", dedup);
    rt_dataset_release(kept);
    /* Bob's next dataset goes over the cap: only bob's own are dropped. */
    rt_dataset *b2 = make_ds_of(10, 2, bob);
    CHECK(rt_data_store_put(s, b2, &kept, &dedup) == 0 && kept == b2, "bob's second");
    rt_dataset_release(kept);
    rt_dataset *f = rt_data_store_find_key(s, alice, k1);
    CHECK(f == a, "alice's dataset survives bob's uploads");
    rt_dataset_release(f);
    CHECK(rt_data_store_find_key(s, bob, k1) == NULL, "bob's first was dropped for his second");
    CHECK(rt_principal_used(bob, RT_Q_STORE_BYTES) == 120, "bob's dropped one gave back its bytes");
    /* Alice's only dataset is all she could drop: when only others' data
     * is in the way, her upload is refused. */
    rt_dataset *f1 = rt_data_store_find_key(s, alice, k1); /* a call holds it */
    rt_dataset *a2 = make_ds_of(10, 3, alice);
    CHECK(rt_data_store_put(s, a2, &kept, &dedup) == RT_ETOOBIG, "alice refused");
    CHECK(rt_principal_used(alice, RT_Q_STORE_BYTES) == 120, "the refused one gave back its bytes");
    rt_dataset_release(f1);
    CHECK(rt_data_store_evict_one(s, alice) == 1 && rt_data_store_evict_one(s, alice) == 0,
          "evict_one drops alice's one dataset");
    CHECK(rt_principal_used(alice, RT_Q_STORE_BYTES) == 0, "and gives back its bytes");
    rt_data_store_destroy(s);
    CHECK(rt_principal_used(bob, RT_Q_STORE_BYTES) == 0 && rt_principal_set_budget_used(ps) == 0,
          "everything given back");
    rt_principal_set_destroy(ps);
}

int main(void)
{
    RUN(test_put_dedup_find);
    RUN(test_eviction);
    RUN(test_owners);
    return itest_summary();
}
