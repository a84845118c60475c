// What an inference engine's connector does per request, as RPCs with checks: read the cached
// prefix of a prompt, and write the blocks it computed in a two-phase session.

import { check } from 'k6';
import { call, field } from './rpc.js';

let seq = 0;

/** A trace id unique within the run (VU number and a per-VU counter; setup() is VU 0). */
function traceId(kind) {
  seq += 1;
  return `k6-${kind}-${__VU}-${seq}`;
}

/** How many leading keys `block_mask` marks as already present (the prefix kvcm skipped). */
export function maskedPrefix(mask) {
  if (!mask) return 0;
  if (mask.offset !== undefined && mask.offset !== null) return Number(mask.offset);
  const values = (mask.bool_masks && mask.bool_masks.values) || [];
  let n = 0;
  while (n < values.length && values[n]) n++;
  return n;
}

/**
 * `getCacheLocation` QT_PREFIX_MATCH of `keys`: returns `{ok, hits}` — `hits` the length of the
 * served prefix. `expectHits` (optional) is checked: the prefix a caller knows is serving.
 */
export function readPrefix(instance, keys, { tags, expectHits } = {}) {
  const { res, ok } = call(
    'meta',
    'getCacheLocation',
    { trace_id: traceId('read'), instance_id: instance, query_type: 'QT_PREFIX_MATCH', block_keys: keys },
    { tags },
  );
  const hits = field(res, 'locations.#') || 0;
  let good = ok;
  if (ok && expectHits !== undefined) {
    good = check(hits, { [`getCacheLocation: prefix of ${expectHits === keys.length ? 'all' : 'the known'} blocks hit`]: (h) => h === expectHits }, tags);
  }
  return { ok: good, hits };
}

/**
 * `startWriteCache` of `keys` then `finishWriteCache` reporting every new block written.
 * Returns `{ok, masked, written}`: `masked` the leading keys kvcm said were present, `written`
 * the new blocks. `expectMasked` (optional) is checked against the mask.
 */
export function writeSession(instance, keys, { tags, expectMasked } = {}) {
  const start = call(
    'meta',
    'startWriteCache',
    { trace_id: traceId('write'), instance_id: instance, block_keys: keys, write_timeout_seconds: 30 },
    { tags },
  );
  if (!start.ok) return { ok: false, masked: 0, written: 0 };
  const sessionId = field(start.res, 'write_session_id');
  const mask = field(start.res, 'block_mask');
  const locations = field(start.res, 'locations.#') || 0;
  const masked = maskedPrefix(mask);
  const shape = {
    'startWriteCache: a session id': () => typeof sessionId === 'string' && sessionId.length > 0,
    'startWriteCache: one location per new block': () => {
      const values = mask && mask.bool_masks && mask.bool_masks.values;
      const present = values && values.length ? values.filter(Boolean).length : masked;
      return locations === keys.length - present;
    },
  };
  if (expectMasked !== undefined) shape['startWriteCache: the known prefix is masked'] = () => masked === expectMasked;
  if (!check(null, shape, tags)) return { ok: false, masked, written: 0 };
  const finish = call(
    'meta',
    'finishWriteCache',
    {
      trace_id: traceId('finish'),
      instance_id: instance,
      write_session_id: sessionId,
      success_blocks: { offset: locations },
    },
    { tags },
  );
  return { ok: finish.ok, masked, written: locations };
}
