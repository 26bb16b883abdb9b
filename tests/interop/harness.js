// What the node tests share: test(name, fn) runs one check and prints
// "ok" or "FAIL" with the error; counts() is how many of each so far.
'use strict';
const tally = { passed: 0, failed: 0 };
async function test(name, fn) {
  try {
    await fn();
    tally.passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    tally.failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
const counts = () => ({ ...tally });
module.exports = { test, counts };
