// spike — does kvcm take a sudden burst and come back to its normal latency afterwards?
//
// Prefix reads (128 blocks, warm) and 32-block write sessions (a quarter of the read rate) at
// BASE_RATE reads/s (default 50), rising within seconds to PEAK_RATE (300), holding, falling back,
// over DURATION in all (60s): baseline 25 %, ramp 5 %, peak 30 %, ramp 5 %, back at the base rate
// 35 %. Requests are tagged with their phase — baseline, spike (ramps included), settle (the
// first 10 % back at the base rate, not judged) and recovery; the thresholds hold baseline and
// recovery to the normal SLO and the spike to a looser one (SPIKE_P99_MS, 1000), and no request
// may fail in any phase.
//
//   make loadtest SCENARIO=spike PEAK_RATE=1000 DURATION=3m

import { BASE_THRESHOLDS, env, envInt, seconds, slo } from '../lib/config.js';
import { prepareMix, readOne, writeOne } from '../lib/mix.js';
import { phaseOf } from '../lib/phase.js';
import { cleanup } from '../lib/setup.js';
import { SUMMARY_TREND_STATS, summaryFor } from '../lib/summary.js';

const TOTAL_S = seconds(env('DURATION', '60s'));
const BASE = envInt('BASE_RATE', 50);
const PEAK = envInt('PEAK_RATE', 300);
const SPIKE_P99 = `p(99)<${envInt('SPIKE_P99_MS', 1000)}`;
const SHAPE = [0.25, 0.05, 0.3, 0.05, 0.35];
// Phases by the fraction of the run elapsed: the ramps count as spike.
const PHASES = [['baseline', 0.25], ['spike', 0.65], ['settle', 0.75], ['recovery', 1]];

function stages(base, peak) {
  const d = SHAPE.map((f) => `${Math.max(1, Math.round(f * TOTAL_S))}s`);
  return [
    { target: base, duration: d[0] },
    { target: peak, duration: d[1] },
    { target: peak, duration: d[2] },
    { target: base, duration: d[3] },
    { target: base, duration: d[4] },
  ];
}

function arrivals(exec, base, peak, maxVUs) {
  return {
    executor: 'ramping-arrival-rate',
    exec,
    startRate: base,
    timeUnit: '1s',
    stages: stages(base, peak),
    preAllocatedVUs: Math.min(maxVUs, Math.max(4, Math.ceil(base / 10))),
    maxVUs,
  };
}

export const options = {
  setupTimeout: '120s',
  summaryTrendStats: SUMMARY_TREND_STATS,
  scenarios: {
    reads: arrivals('reads', BASE, PEAK, envInt('MAX_VUS', 128)),
    writes: arrivals('writes', Math.max(1, Math.round(BASE / 4)), Math.max(1, Math.round(PEAK / 4)), envInt('MAX_VUS', 128) / 2),
  },
  thresholds: {
    ...BASE_THRESHOLDS,
    // Over the whole run, every RPC within the spike's bound (per-RPC numbers in the summary);
    // the normal SLO applies to the phases before and after it.
    'http_req_duration{rpc:getCacheLocation}': [SPIKE_P99],
    'http_req_duration{rpc:startWriteCache}': [SPIKE_P99],
    'http_req_duration{rpc:finishWriteCache}': [SPIKE_P99],
    'http_req_duration{phase:baseline}': slo(25, 50),
    'http_req_duration{phase:spike}': [SPIKE_P99],
    'http_req_duration{phase:recovery}': slo(25, 50),
    'http_req_failed{phase:spike}': ['rate<0.01'],
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

export const handleSummary = summaryFor('spike');
