// grpc-js's first call on a new channel against rtraind, the peer of
// rtrain's (bench/story.py): a client, one empty Ping, closed; the first in
// this process (grpc-js loaded already), then N more, each on a new client
// with its own connection (a local subchannel pool: nothing is shared).
//
//   NODE_PATH=$(tests/interop/run.sh --dir)/node_modules node bench/first_call.js HOST:PORT [N]
//
// Prints "first_call cold_us=... p50_us=... version=grpc-js-X". The request
// and the response go as raw bytes (an empty PingRequest is zero bytes), so
// no .proto is loaded. Asserts nothing about time.
'use strict';
let grpc;
try {
  grpc = require('@grpc/grpc-js');
} catch (e) {
  console.log('@grpc/grpc-js not installed (tests/interop/run.sh --install)');
  process.exit(1);
}
const version = require('@grpc/grpc-js/package.json').version;
const target = process.argv[2];
const n = Number(process.argv[3] || 20);
const id = (x) => x;

function one() {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const c = new grpc.Client(target, grpc.credentials.createInsecure(),
                              {'grpc.use_local_subchannel_pool': 1});
    c.makeUnaryRequest('/rtrain.v1.Trainer/Ping', id, id, Buffer.alloc(0),
                       {deadline: Date.now() + 30000}, (err) => {
      const us = Number(process.hrtime.bigint() - t0) / 1e3;
      c.close();
      if (err) reject(err); else resolve(us);
    });
  });
}

(async () => {
  const cold = await one();
  const v = [];
  for (let i = 0; i < n; i++) v.push(await one());
  v.sort((a, b) => a - b);
  const p50 = v[Math.max(1, Math.ceil(0.5 * n)) - 1]; // nearest rank, as rtrain's
  console.log(`first_call cold_us=${cold.toFixed(1)} p50_us=${p50.toFixed(1)} ` +
              `version=grpc-js-${version}`);
})().catch((e) => { console.error(String(e)); process.exit(1); });
