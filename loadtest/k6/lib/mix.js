// The read + write mix of `spike` and `soak`: prefix reads of warm 128-block documents and
// 32-block write sessions, on a set of instances warmed in setup().

import { readPrefix, writeSession } from './engine.js';
import { extend, systemPrompt } from './keys.js';
import { prepare, warm } from './setup.js';

export const PROMPTS = 4;
export const PROMPT_BLOCKS = 64;
export const DOC_BLOCKS = 128;
export const WRITE_BLOCKS = 32;

/** setup(): `instances` instances with 16 warm documents each. */
export function prepareMix(instances) {
  const data = prepare(instances);
  data.docs = warm(data, { prompts: PROMPTS, blocks: PROMPT_BLOCKS, docs: 16, docBlocks: DOC_BLOCKS });
  return data;
}

function pick(list) {
  return list[Math.floor(Math.random() * list.length)];
}

/** One prefix read of a random warm document; all of it must hit. */
export function readOne(data, tags) {
  const instance = pick(data.instances);
  readPrefix(instance, pick(data.docs[instance]), { tags, expectHits: DOC_BLOCKS });
}

const prompts = {};
let sessions = 0;

/** One write session of 32 new blocks continuing a warm system prompt. */
export function writeOne(data, tags) {
  const instance = pick(data.instances);
  const p = Math.floor(Math.random() * PROMPTS);
  const key = `${instance}/${p}`;
  if (!prompts[key]) prompts[key] = systemPrompt(data.run, instance, p, PROMPT_BLOCKS);
  sessions += 1;
  const keys = extend(prompts[key], `mix-session-${__VU}-${sessions}`, WRITE_BLOCKS).keys;
  writeSession(instance, keys, { tags, expectMasked: PROMPT_BLOCKS });
}
