// write — how many two-phase write sessions per second can kvcm take?
//
// A constant arrival rate of RATE sessions/s (default 50) for DURATION (30s), spread over
// INSTANCES instances (4). Each session is startWriteCache of 32 new blocks (a fresh
// conversation continuing one of the instance's 4 warm 16-block system prompts, so the request
// names 48 keys and kvcm masks the 16 present ones) then finishWriteCache reporting all 32 written.
//
//   make loadtest SCENARIO=write RATE=100 DURATION=1m

import { BASE_THRESHOLDS, env, envInt, slo } from '../lib/config.js';
import { writeSession } from '../lib/engine.js';
import { extend, systemPrompt } from '../lib/keys.js';
import { cleanup, prepare, warm } from '../lib/setup.js';
import { SUMMARY_TREND_STATS, summaryFor } from '../lib/summary.js';

const RATE = envInt('RATE', 50);
const PROMPTS = 4;
const PROMPT_BLOCKS = 16;
const BLOCKS = 32;

export const options = {
  setupTimeout: '120s',
  summaryTrendStats: SUMMARY_TREND_STATS,
  scenarios: {
    write: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: env('DURATION', '30s'),
      preAllocatedVUs: envInt('VUS', 8),
      maxVUs: envInt('MAX_VUS', 64),
    },
  },
  thresholds: {
    ...BASE_THRESHOLDS,
    'http_req_duration{rpc:startWriteCache}': slo(50, 100),
    'http_req_duration{rpc:finishWriteCache}': slo(50, 100),
    dropped_iterations: [`count<${Math.max(1, Math.floor(RATE))}`],
  },
};

export function setup() {
  const data = prepare(envInt('INSTANCES', 4));
  warm(data, { prompts: PROMPTS, blocks: PROMPT_BLOCKS });
  return data;
}

const prompts = {};

export default function (data) {
  const instance = data.instances[__ITER % data.instances.length];
  const p = Math.floor(Math.random() * PROMPTS);
  const key = `${instance}/${p}`;
  if (!prompts[key]) prompts[key] = systemPrompt(data.run, instance, p, PROMPT_BLOCKS);
  const keys = extend(prompts[key], `session-${__VU}-${__ITER}`, BLOCKS).keys;
  writeSession(instance, keys, { expectMasked: PROMPT_BLOCKS });
}

export function teardown(data) {
  cleanup(data);
}

export const handleSummary = summaryFor('write');
