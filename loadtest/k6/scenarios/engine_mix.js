// engine_mix — what an engine fleet does: multi-turn conversations across many instances.
//
// setup() registers INSTANCES instances (default 8) and warms 4 system prompts of 32 blocks on
// each. Then turns arrive at RATE/s (40) for DURATION (30s). A turn continues one of the VU's
// open conversations or starts a new one on a random instance and system prompt; it names the
// conversation so far plus 2–16 new blocks (the user's message and the last answer), and does
// what a connector does:
//
//   1. getCacheLocation QT_PREFIX_MATCH — checked: exactly the conversation so far hits
//   2. startWriteCache of all the keys — checked: kvcm masks exactly that prefix
//   3. finishWriteCache of the new blocks
//
// A conversation ends after 2–8 turns. `kvcm_prefix_hit_fraction` is the share of each turn's
// blocks served from cache.
//
//   make loadtest SCENARIO=engine_mix INSTANCES=32 RATE=60 DURATION=2m

import { Trend } from 'k6/metrics';
import { BASE_THRESHOLDS, env, envInt, slo } from '../lib/config.js';
import { readPrefix, writeSession } from '../lib/engine.js';
import { extend, randInt, systemPrompt } from '../lib/keys.js';
import { cleanup, prepare, warm } from '../lib/setup.js';
import { SUMMARY_TREND_STATS, summaryFor } from '../lib/summary.js';

const RATE = envInt('RATE', 40);
const PROMPTS = 4;
const PROMPT_BLOCKS = 32;
const hitFraction = new Trend('kvcm_prefix_hit_fraction');

export const options = {
  setupTimeout: '120s',
  summaryTrendStats: SUMMARY_TREND_STATS,
  scenarios: {
    engine_mix: {
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
    'http_req_duration{rpc:startWriteCache}': slo(50, 100),
    'http_req_duration{rpc:finishWriteCache}': slo(50, 100),
    dropped_iterations: [`count<${Math.max(1, Math.floor(RATE))}`],
  },
};

export function setup() {
  const data = prepare(envInt('INSTANCES', 8));
  warm(data, { prompts: PROMPTS, blocks: PROMPT_BLOCKS });
  return data;
}

// This VU's open conversations: {instance, chain, turn, turns}.
const open = [];
let started = 0;

function conversation(data) {
  if (open.length > 0 && Math.random() < 0.8) return open[Math.floor(Math.random() * open.length)];
  const instance = data.instances[Math.floor(Math.random() * data.instances.length)];
  const p = Math.floor(Math.random() * PROMPTS);
  const conv = { instance, chain: systemPrompt(data.run, instance, p, PROMPT_BLOCKS), turn: 0, turns: randInt(2, 8), id: started++ };
  open.push(conv);
  return conv;
}

export default function (data) {
  const conv = conversation(data);
  const known = conv.chain.keys.length;
  const next = extend(conv.chain, `conversation-${__VU}-${conv.id}-turn-${conv.turn}`, randInt(2, 16));
  const read = readPrefix(conv.instance, next.keys, { expectHits: known });
  hitFraction.add(read.hits / next.keys.length);
  const write = writeSession(conv.instance, next.keys, { expectMasked: known });
  conv.turn += 1;
  if (write.ok) conv.chain = next;
  if (!write.ok || conv.turn >= conv.turns) open.splice(open.indexOf(conv), 1);
}

export function teardown(data) {
  cleanup(data);
}

export const handleSummary = summaryFor('engine_mix');
