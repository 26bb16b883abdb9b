/* rt_dash_assets.h - the dashboard's files, embedded in the binary at build
 * time (server/obs/dash, made into rt_dash_assets.c by embed_assets.cmake):
 * the daemon serves them from memory and reads nothing at run time. */
#ifndef RTRAIN_DASH_ASSETS_H
#define RTRAIN_DASH_ASSETS_H

#include <stddef.h>

typedef struct rt_dash_asset {
    const char *path; /* "/app.js"; the page is "/" */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
    int page; /* 1: shows data, served after the access check */
} rt_dash_asset;

/* The asset at path, or NULL. */
const rt_dash_asset *rt_dash_asset_find(const char *path);

extern const unsigned char rt_dash_asset_login_html[];
extern const size_t rt_dash_asset_login_html_len;

#endif
