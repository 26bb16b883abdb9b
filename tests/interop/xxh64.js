// XXH64 in BigInt arithmetic, written here from the xxHash specification, so
// that the upload checksums the interop tests send are not rtrain's own.
'use strict';
const M64 = (1n << 64n) - 1n;
const P1 = 11400714785074694791n, P2 = 14029467366897019727n, P3 = 1609587929392839161n;
const P4 = 9650029242287828579n, P5 = 2870177450012600261n;
const rotl = (x, r) => ((x << r) | (x >> (64n - r))) & M64;
const round = (acc, v) => (rotl((acc + v * P2) & M64, 31n) * P1) & M64;
const merge = (acc, v) => (((acc ^ round(0n, v)) * P1) + P4) & M64;
function xxh64(buf, seed = 0n) {
  const len = buf.length;
  let p = 0, h;
  const u64 = (i) => buf.readBigUInt64LE(i);
  if (len >= 32) {
    let v1 = (seed + P1 + P2) & M64, v2 = (seed + P2) & M64, v3 = seed, v4 = (seed - P1) & M64;
    while (p <= len - 32) {
      v1 = round(v1, u64(p)); v2 = round(v2, u64(p + 8));
      v3 = round(v3, u64(p + 16)); v4 = round(v4, u64(p + 24));
      p += 32;
    }
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & M64;
    h = merge(h, v1); h = merge(h, v2); h = merge(h, v3); h = merge(h, v4);
  } else {
    h = (seed + P5) & M64;
  }
  h = (h + BigInt(len)) & M64;
  while (p + 8 <= len) {
    h ^= round(0n, u64(p));
    h = ((rotl(h, 27n) * P1) + P4) & M64;
    p += 8;
  }
  if (p + 4 <= len) {
    h ^= (BigInt(buf.readUInt32LE(p)) * P1) & M64;
    h = ((rotl(h, 23n) * P2) + P3) & M64;
    p += 4;
  }
  while (p < len) {
    h ^= (BigInt(buf[p]) * P5) & M64;
    h = (rotl(h, 11n) * P1) & M64;
    p++;
  }
  h ^= h >> 33n; h = (h * P2) & M64;
  h ^= h >> 29n; h = (h * P3) & M64;
  h ^= h >> 32n;
  return h;
}

module.exports = { xxh64 };
