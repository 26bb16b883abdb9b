/* test_spec.c - the client's feature spec parser (rtrain_data.h) and the
 * wire ExampleSpec it produces, read back by the daemon's converter. */
#include <stdio.h>
#include <string.h>

#include "rt_example.h"
#include "rtrain.pb-c.h"

/* The client side, declared here: rtrain.h and the daemon's rt_data.h
 * both name RT_ROLE_*, so one file cannot include both. These match
 * include/rtrain/rtrain_data.h and client/lib/rt_client_impl.h. */
typedef struct rt_client_example_spec rt_client_example_spec;
typedef struct rt_client_image_opts {
    int height, width;
    int channels;
    int resize;
    int n_mean, n_std;
    float mean[3], std[3];
    int crop_pad;
    int flip;
    float brightness, contrast;
} rt_client_image_opts;
int rt_client_example_spec_parse(const char *features, const char *label_key,
                                 rt_client_example_spec **out, char *err, size_t errlen);
void rt_client_example_spec_free(rt_client_example_spec *s);
void rt_client_example_spec_set_image(rt_client_example_spec *s, const rt_client_image_opts *o);
void rt_client_example_spec_set_skip_bad(rt_client_example_spec *s, int skip);
Rtrain__V1__ExampleSpec *rt__example_spec_pb(const rt_client_example_spec *s);

#include "../lib/rt_check.h"

int main(void)
{
    char err[256];
    rt_client_example_spec *s;
    CHECK(rt_client_example_spec_parse("image:jpeg,x:float[4],@f:float[5x2],label:int64", NULL,
                                       &s, err, sizeof err) == 0);
    rt_client_image_opts im = {.height = 32, .width = 24, .n_mean = 1, .mean = {0.5f},
                               .n_std = 3, .std = {0.1f, 0.2f, 0.3f}, .flip = 1,
                               .crop_pad = 3};
    rt_client_example_spec_set_image(s, &im);
    rt_client_example_spec_set_skip_bad(s, 1);
    Rtrain__V1__ExampleSpec *pb = rt__example_spec_pb(s);
    CHECK(pb->n_features == 4 && pb->sequence_example == 1);
    CHECK(!strcmp(pb->features[2]->key, "f") && pb->features[2]->sequence &&
          pb->features[2]->n_shape == 2 && pb->features[2]->shape[1] == 2);
    CHECK(pb->features[3]->label && !pb->features[0]->label);
    /* through the wire form and back as the daemon reads it */
    size_t n = rtrain__v1__example_spec__get_packed_size(pb);
    uint8_t buf[1024];
    CHECK(n < sizeof buf);
    rtrain__v1__example_spec__pack(pb, buf);
    Rtrain__V1__ExampleSpec *back = rtrain__v1__example_spec__unpack(NULL, n, buf);
    rt_example_spec es;
    CHECK(back && rt_example_spec_from_pb(back, &es, err, sizeof err) == 0);
    CHECK(es.n == 4 && es.sequence_example && es.skip_bad);
    CHECK(es.f[0].kind == RT_FEAT_JPEG && es.f[1].ndim == 1 && es.f[1].dims[0] == 4);
    CHECK(es.img.h == 32 && es.img.w == 24 && es.img.c == 3 && es.img.flip && es.img.crop_pad == 3);
    CHECK(es.img.mean[2] == 0.5f && es.img.std[1] == 0.2f);
    rtrain__v1__example_spec__free_unpacked(back, NULL);
    rt_client_example_spec_free(s);

    /* --label picks the label; errors name the entry */
    CHECK(rt_client_example_spec_parse("a:int64,b:float", "a", &s, err, sizeof err) == 0);
    CHECK(rt__example_spec_pb(s)->features[0]->label);
    rt_client_example_spec_free(s);
    static const char *bad[] = {"", "x", ":int64", "x:int32", "x:float[0]", "x:float[4",
                                "x:float[2x3x4]", "x:float,,y:int64"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = NULL;
        CHECK(rt_client_example_spec_parse(bad[i], NULL, &s, err, sizeof err) == RT_EINVAL);
        CHECK(s == NULL && err[0]);
    }
    CHECK(rt_client_example_spec_parse("x:float", "y", &s, err, sizeof err) == RT_EINVAL);
    CHECK(strstr(err, "'y' is not in the feature spec") != NULL);

    /* without --label: the key "label" or one ending in "/label"; two such
     * keys are named, never guessed between; "labels", "my_label" and a
     * bare "/label" prefix are no labels */
    CHECK(rt_client_example_spec_parse("image/encoded:jpeg,image/class/label:int64,"
                                       "image/height:int64", NULL, &s, err, sizeof err) == 0);
    CHECK(rt__example_spec_pb(s)->features[1]->label && !rt__example_spec_pb(s)->features[0]->label &&
          !rt__example_spec_pb(s)->features[2]->label);
    rt_client_example_spec_free(s);
    CHECK(rt_client_example_spec_parse("labels:int64,my_label:int64,x:float", NULL, &s, err,
                                       sizeof err) == 0);
    for (int i = 0; i < 3; i++) CHECK(!rt__example_spec_pb(s)->features[i]->label);
    rt_client_example_spec_free(s);
    s = NULL;
    CHECK(rt_client_example_spec_parse("img:jpeg,image/class/label:int64,label:int64", NULL, &s,
                                       err, sizeof err) == RT_EINVAL);
    CHECK(s == NULL && strstr(err, "'image/class/label' and 'label'") != NULL);
    CHECK(rt_client_example_spec_parse("img:jpeg,a/label:int64,b/label:int64", "b/label", &s, err,
                                       sizeof err) == 0);
    CHECK(rt__example_spec_pb(s)->features[2]->label && !rt__example_spec_pb(s)->features[1]->label);
    rt_client_example_spec_free(s);

    /* the daemon's checks on a wire spec */
    Rtrain__V1__ExampleSpec w = RTRAIN__V1__EXAMPLE_SPEC__INIT;
    CHECK(rt_example_spec_from_pb(&w, &es, err, sizeof err) == RT_EINVAL);
    CHECK(rt_example_spec_from_pb(NULL, &es, err, sizeof err) == RT_EINVAL);
    CHECK(rt_client_example_spec_parse("img:image,label:int64", NULL, &s, err, sizeof err) == 0);
    CHECK(rt_example_spec_from_pb(rt__example_spec_pb(s), &es, err, sizeof err) == RT_EINVAL);
    CHECK(strstr(err, "input size") != NULL); /* an image needs a size */
    rt_client_image_opts big = {.height = 10000, .width = 10};
    rt_client_example_spec_set_image(s, &big);
    CHECK(rt_example_spec_from_pb(rt__example_spec_pb(s), &es, err, sizeof err) == RT_EINVAL);
    rt_client_image_opts two = {.height = 8, .width = 8, .n_mean = 2, .mean = {1, 2}};
    rt_client_example_spec_set_image(s, &two);
    CHECK(rt_example_spec_from_pb(rt__example_spec_pb(s), &es, err, sizeof err) == RT_EINVAL);
    CHECK(strstr(err, "2 values for 3 channels") != NULL);
    rt_client_example_spec_free(s);
    if (failures) {
        fprintf(stderr, "test_spec: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_spec: ok\n");
    return 0;
}
