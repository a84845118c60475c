// Block keys the way engines make them: each key is a hash of its parent key and its own
// tokens, so equal prefixes give equal keys and one differing block changes every key after it.
//
// A `Chain` is `{keys: [string…], h1, h2}`: the keys (signed 64-bit integers written as decimal
// strings, as kvcm accepts and returns them; here always positive, < 2^62) and the hash state
// after the last one. Chains are plain objects, so they pass through setup() data.
//
// Shapes of a run: a few **system prompts** per instance (shared by every conversation on it),
// then per conversation its own turns; `extend` adds the blocks of one turn.

function mix32(x) {
  // murmur3's 32-bit finaliser
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

function hashString(s, seed) {
  let h = seed >>> 0;
  for (let i = 0; i < s.length; i++) h = mix32(h ^ Math.imul(s.charCodeAt(i) + i, 0x9e3779b1));
  return h;
}

function keyString(h1, h2) {
  // h1 · 10^9 + (h2 mod 10^9): at most 4294967295999999999 < 2^63.
  const lo = String(h2 % 1000000000);
  return h1 === 0 ? lo : `${h1}${'000000000'.slice(lo.length)}${lo}`;
}

/** An empty chain rooted at `label` (e.g. the run id and instance). */
export function root(label) {
  return { keys: [], h1: hashString(label, 0x2545f491), h2: hashString(label, 0x68e31da4) };
}

/** A new chain: `chain`'s keys plus `n` blocks of the content named `label`. */
export function extend(chain, label, n) {
  const salt = hashString(String(label), 0x9e3779b9);
  let { h1, h2 } = chain;
  const keys = chain.keys.slice();
  for (let i = 0; i < n; i++) {
    h1 = mix32(h1 ^ mix32(salt + i));
    h2 = mix32(h2 + Math.imul(h1 | 1, 0x27d4eb2f) + i);
    keys.push(keyString(h1, h2));
  }
  return { keys, h1, h2 };
}

/** System prompt `p` of `instance` in run `run`: `blocks` keys every conversation shares. */
export function systemPrompt(run, instance, p, blocks) {
  return extend(root(`${run}/${instance}`), `system-prompt-${p}`, blocks);
}

/** A uniform integer in [lo, hi]. */
export function randInt(lo, hi) {
  return lo + Math.floor(Math.random() * (hi - lo + 1));
}
