// prefix_read — how fast can kvcm answer engines' prefix lookups on a warm instance?
//
// setup() warms INSTANCES instances (default 1) with DOCS documents (16) of 128 blocks each,
// which share 4 system prompts of 64 blocks. The load is a constant arrival rate of RATE reads/s
// (200) for DURATION (30s): each reads the full 128-block prefix of a random document
// (getCacheLocation QT_PREFIX_MATCH) and checks that all 128 blocks hit.
//
//   make loadtest SCENARIO=prefix_read RATE=500 DURATION=2m

import { BASE_THRESHOLDS, env, envInt, slo } from '../lib/config.js';
import { readPrefix } from '../lib/engine.js';
import { cleanup, prepare, warm } from '../lib/setup.js';
import { SUMMARY_TREND_STATS, summaryFor } from '../lib/summary.js';

const RATE = envInt('RATE', 200);
const BLOCKS = 128;

export const options = {
  setupTimeout: '120s',
  summaryTrendStats: SUMMARY_TREND_STATS,
  scenarios: {
    prefix_read: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: env('DURATION', '30s'),
      preAllocatedVUs: envInt('VUS', 16),
      maxVUs: envInt('MAX_VUS', 64),
    },
  },
  thresholds: {
    ...BASE_THRESHOLDS,
    'http_req_duration{rpc:getCacheLocation}': slo(25, 50),
    dropped_iterations: [`count<${Math.max(1, Math.floor(RATE))}`],
  },
};

export function setup() {
  const data = prepare(envInt('INSTANCES', 1));
  data.docs = warm(data, { prompts: 4, blocks: 64, docs: envInt('DOCS', 16), docBlocks: BLOCKS });
  return data;
}

export default function (data) {
  const instance = data.instances[Math.floor(Math.random() * data.instances.length)];
  const docs = data.docs[instance];
  const keys = docs[Math.floor(Math.random() * docs.length)];
  readPrefix(instance, keys, { expectHits: BLOCKS });
}

export function teardown(data) {
  cleanup(data);
}

export const handleSummary = summaryFor('prefix_read');
