// Phases of a scenario in time, as a request tag, so thresholds can hold each phase to its own
// SLO: `http_req_duration{phase:recovery}` after a spike, `{phase:late}` at the end of a soak.

import exec from 'k6/execution';

/**
 * The phase the running scenario is in: `bounds` is `[[name, endFraction]…]` in order, fractions
 * of `totalS` seconds since the scenario started.
 */
export function phaseOf(bounds, totalS) {
  const elapsed = (Date.now() - exec.scenario.startTime) / 1000 / totalS;
  for (const [name, end] of bounds) if (elapsed < end) return name;
  return bounds[bounds.length - 1][0];
}
