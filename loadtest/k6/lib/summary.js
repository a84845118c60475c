// handleSummary for every scenario: the full k6 summary as JSON at KVCM_K6_SUMMARY (default
// `.kvcm/k6/<scenario>.json`, relative to where k6 runs), with a `kvcm` section on top that says
// what a reader wants first — requests/s, per-RPC latency percentiles, the check rate, which
// checks and thresholds failed — and the same as a few lines on stdout.

import { ADMIN_URL, META_URL, env } from './config.js';

/** Trend stats every scenario reports (p(99) is not among k6's defaults). */
export const SUMMARY_TREND_STATS = ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'];

function failedChecks(group, out) {
  for (const c of group.checks || []) if (c.fails > 0) out.push({ name: c.name, passes: c.passes, fails: c.fails });
  for (const g of group.groups || []) failedChecks(g, out);
  return out;
}

function round(x) {
  return x === undefined ? null : Math.round(x * 100) / 100;
}

/** The `kvcm` section of the summary. */
export function digest(scenario, data) {
  const m = data.metrics;
  const latency = {};
  for (const [name, metric] of Object.entries(m)) {
    const sub = /^http_req_duration\{(rpc|phase):([^}]+)\}$/.exec(name);
    if (sub) latency[sub[1] === 'rpc' ? sub[2] : `phase:${sub[2]}`] = { med: round(metric.values.med), p95: round(metric.values['p(95)']), p99: round(metric.values['p(99)']) };
  }
  const custom = {};
  for (const [name, metric] of Object.entries(m)) {
    if (name.startsWith('kvcm_') && metric.type === 'trend') custom[name] = { avg: round(metric.values.avg), med: round(metric.values.med), p95: round(metric.values['p(95)']) };
  }
  const failedThresholds = [];
  for (const [name, metric] of Object.entries(m)) {
    for (const [t, v] of Object.entries(metric.thresholds || {})) if (!v.ok) failedThresholds.push(`${name}: ${t}`);
  }
  const checks = m.checks ? m.checks.values : { passes: 0, fails: 0, rate: 0 };
  const d = m.http_req_duration ? m.http_req_duration.values : {};
  return {
    scenario,
    meta_url: META_URL,
    admin_url: ADMIN_URL,
    duration_s: round(data.state.testRunDurationMs / 1000),
    requests: m.http_reqs ? m.http_reqs.values.count : 0,
    req_per_s: m.http_reqs ? round(m.http_reqs.values.rate) : 0,
    iterations: m.iterations ? m.iterations.values.count : 0,
    dropped_iterations: m.dropped_iterations ? m.dropped_iterations.values.count : 0,
    http_req_failed_rate: m.http_req_failed ? round(m.http_req_failed.values.rate) : null,
    latency_ms: { all: { med: round(d.med), p95: round(d['p(95)']), p99: round(d['p(99)']) }, ...latency },
    custom,
    checks: { passes: checks.passes, fails: checks.fails, rate: checks.rate },
    failed_checks: failedChecks(data.root_group, []),
    failed_thresholds: failedThresholds,
  };
}

function text(k) {
  const lines = [
    `kvcm k6 ${k.scenario}: ${k.requests} requests in ${k.duration_s} s = ${k.req_per_s} req/s, ` +
      `${k.iterations} iterations (${k.dropped_iterations} dropped), failed requests ${k.http_req_failed_rate}`,
    `  checks: ${k.checks.passes} passed, ${k.checks.fails} failed (rate ${round(k.checks.rate)})`,
  ];
  for (const [rpc, l] of Object.entries(k.latency_ms)) lines.push(`  ${rpc.padEnd(20)} med ${l.med} ms  p95 ${l.p95} ms  p99 ${l.p99} ms`);
  for (const [name, v] of Object.entries(k.custom)) lines.push(`  ${name}: avg ${v.avg} med ${v.med} p95 ${v.p95}`);
  for (const c of k.failed_checks) lines.push(`  FAILED check ${c.name}: ${c.fails} of ${c.passes + c.fails}`);
  for (const t of k.failed_thresholds) lines.push(`  FAILED threshold ${t}`);
  return lines.join('\n') + '\n';
}

/** A `handleSummary` for `scenario`. */
export function summaryFor(scenario) {
  return (data) => {
    const k = digest(scenario, data);
    const path = env('KVCM_K6_SUMMARY', `.kvcm/k6/${scenario}.json`);
    return { stdout: text(k) + `  summary: ${path}\n`, [path]: JSON.stringify({ kvcm: k, k6: data }, null, 2) };
  };
}
