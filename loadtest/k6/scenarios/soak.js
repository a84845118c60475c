// soak — does kvcm hold its latency and make no errors over a long steady load?
//
// RATE prefix reads/s (default 100, 128 warm blocks each) and WRITE_RATE write sessions/s (20,
// 32 new blocks each, so the instances keep growing) for DURATION (default 10m; bounded: set it
// to hours for a real soak). Requests are tagged early (first 20 %), middle and late (last
// 20 %); the same SLO holds for early and late, so latency that creeps up as data grows fails
// the run, as does any error.
//
//   make loadtest SCENARIO=soak DURATION=2h RATE=300 WRITE_RATE=50

import { BASE_THRESHOLDS, env, envInt, seconds, slo } from '../lib/config.js';
import { prepareMix, readOne, writeOne } from '../lib/mix.js';
import { phaseOf } from '../lib/phase.js';
import { cleanup } from '../lib/setup.js';
import { SUMMARY_TREND_STATS, summaryFor } from '../lib/summary.js';

const DURATION = env('DURATION', '10m');
const TOTAL_S = seconds(DURATION);
const PHASES = [['early', 0.2], ['middle', 0.8], ['late', 1]];

function steady(exec, rate, maxVUs) {
  return { executor: 'constant-arrival-rate', exec, rate, timeUnit: '1s', duration: DURATION, preAllocatedVUs: Math.min(maxVUs, Math.max(2, Math.ceil(rate / 20))), maxVUs };
}

export const options = {
  setupTimeout: '120s',
  summaryTrendStats: SUMMARY_TREND_STATS,
  scenarios: {
    reads: steady('reads', envInt('RATE', 100), envInt('MAX_VUS', 64)),
    writes: steady('writes', envInt('WRITE_RATE', 20), envInt('MAX_VUS', 64)),
  },
  thresholds: {
    ...BASE_THRESHOLDS,
    checks: ['rate>0.999'],
    http_req_failed: ['rate<0.001'],
    'http_req_duration{rpc:getCacheLocation}': slo(25, 50),
    'http_req_duration{rpc:startWriteCache}': slo(50, 100),
    'http_req_duration{rpc:finishWriteCache}': slo(50, 100),
    'http_req_duration{phase:early}': slo(25, 50),
    'http_req_duration{phase:late}': slo(25, 50),
  },
};

export function setup() {
  return prepareMix(envInt('INSTANCES', 4));
}

export function reads(data) {
  readOne(data, { phase: phaseOf(PHASES, TOTAL_S) });
}

export function writes(data) {
  writeOne(data, { phase: phaseOf(PHASES, TOTAL_S) });
}

export function teardown(data) {
  cleanup(data);
}

export const handleSummary = summaryFor('soak');
