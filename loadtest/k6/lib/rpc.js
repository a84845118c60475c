// One Tair KVCM RPC over HTTP, checked: `POST <plane>/api/<rpc>` with a JSON body; the reply
// must carry the Tair header `{header: {status: {code, message}, request_id}}` with the expected
// HTTP status and status code. Requests are tagged `plane` and `rpc`, so thresholds and the
// summary can speak per RPC (`http_req_duration{rpc:getCacheLocation}`).

import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import { ADMIN_URL, AUTH, META_URL } from './config.js';

const BASE = { meta: META_URL, admin: ADMIN_URL };

/** Whether a parsed reply carries a well-formed Tair response header. */
export function hasTairHeader(reply) {
  const h = reply && reply.header;
  return Boolean(
    h && h.status && typeof h.status.code === 'string' && typeof h.status.message === 'string' &&
      typeof h.request_id === 'string' && h.request_id.length > 0,
  );
}

/** The status code name of a reply, or '' if it has none. */
export function codeOf(reply) {
  return (reply && reply.header && reply.header.status && reply.header.status.code) || '';
}

/** `res.json(path)` (gjson, in Go: much cheaper than parsing a 35 KB reply in JavaScript), or
 * undefined when the body is not JSON or has no such field. */
export function field(res, path) {
  try {
    return res.json(path);
  } catch (_) {
    return undefined;
  }
}

function parse(res) {
  try {
    return JSON.parse(res.body);
  } catch (_) {
    return null;
  }
}

/**
 * Calls `rpc` on `plane` ('meta' | 'admin') and checks the reply.
 *
 * `opts.status` (default 200) and `opts.code` (default 'OK'; null: do not check the code) are
 * what the reply must have; `opts.auth` replaces the plane's Authorization header ('' sends
 * none); `opts.tags` adds request tags. Returns `{res, reply, ok, code}`: `reply` is the parsed
 * body (null if it is not JSON), `ok` whether every check passed, `code` the status code name.
 */
export function call(plane, rpc, body, opts = {}) {
  const status = opts.status === undefined ? 200 : opts.status;
  const code = opts.code === undefined ? 'OK' : opts.code;
  const auth = opts.auth === undefined ? AUTH[plane] : opts.auth;
  const headers = { 'Content-Type': 'application/json' };
  if (auth) headers.Authorization = auth;
  const params = { headers, tags: Object.assign({ plane, rpc, name: `${plane}/${rpc}` }, opts.tags || {}) };
  if (status !== 200) params.responseCallback = http.expectedStatuses(status);
  const res = http.post(`${BASE[plane]}/api/${rpc}`, typeof body === 'string' ? body : JSON.stringify(body), params);
  const head = { header: field(res, 'header') };
  const what = `${plane} ${rpc}`;
  const checks = {
    [`${what}: HTTP ${status}`]: (r) => r.status === status,
    [`${what}: Tair header`]: () => hasTairHeader(head),
  };
  if (code !== null) checks[`${what}: ${code}`] = () => codeOf(head) === code;
  const ok = check(res, checks, params.tags);
  if (!ok && __ENV.KVCM_K6_VERBOSE) console.warn(`${what}: HTTP ${res.status} ${res.body}`);
  let reply;
  return {
    res,
    ok,
    code: codeOf(head),
    // The whole reply, parsed on first use (hot paths read single fields with `field`).
    get reply() {
      if (reply === undefined) reply = parse(res);
      return reply;
    },
  };
}

/** Like `call`, but a failure stops the run (for setup, where nothing can go on without it). */
export function must(plane, rpc, body, opts = {}) {
  const out = call(plane, rpc, body, opts);
  if (!out.ok) fail(`${plane} ${rpc} failed: HTTP ${out.res.status} ${out.res.body}`);
  return out.reply;
}

/**
 * Fails fast unless both planes answer `GET /api/healthy` with 200 within `timeoutS` seconds
 * (a server that is still starting gets a few retries; a wrong URL fails at once with why).
 */
export function waitHealthy(timeoutS = 10) {
  for (const [plane, base] of Object.entries(BASE)) {
    const deadline = Date.now() + timeoutS * 1000;
    for (;;) {
      const res = http.get(`${base}/api/healthy`, {
        tags: { plane, rpc: 'healthy', name: `${plane}/healthy` },
        responseCallback: http.expectedStatuses(200, 503),
        timeout: '5s',
      });
      if (res.status === 200) break;
      if (res.status === 0 || Date.now() > deadline) {
        fail(`${plane} plane at ${base} is not ready: GET /api/healthy -> ${res.status || res.error} ${res.body || ''}`);
      }
      sleep(0.5);
    }
  }
}
