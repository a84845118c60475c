// Where the load goes and who it claims to be, from the environment (see ../README.md).
//
//   KVCM_META_URL        meta plane base URL (engines)        default http://127.0.0.1:6382
//   KVCM_ADMIN_URL       admin plane base URL (operators)     default http://127.0.0.1:6492
//   KVCM_API_KEY         `kvcm_…` key sent as `Bearer` on the meta plane (and on the admin
//                        plane when nothing else is given: it must then be a ROLE_ADMIN key)
//   KVCM_ADMIN_API_KEY   a ROLE_ADMIN `kvcm_…` key for the admin plane
//   KVCM_ADMIN_USER / KVCM_ADMIN_PASSWORD
//                        an admin account, sent as `Bearer user:password` on the admin plane
//                        (and on the meta plane when no KVCM_API_KEY is given)
//   KVCM_K6_GROUP        use this existing instance group and never touch the admin plane in
//                        setup (an engine key scoped to the group is enough); unset: create the
//                        storage `k6_storage` and group `k6` through the admin plane
//   KVCM_K6_STORAGE_ROOT root_path of the storage `k6_storage`: a directory kvcm's workers can
//                        write (run.sh creates the default, .kvcm/data/k6/, for a local stack)
//   KVCM_K6_SPECS        location specs per block (tp0…)             default 2
//   KVCM_K6_KEEP=1       leave the run's instances in place after the run
//   KVCM_K6_SUMMARY      where handleSummary writes the JSON summary (run.sh sets it)
//   P95_MS / P99_MS      latency SLOs of the thresholds, per scenario defaults

export function env(name, fallback) {
  const v = __ENV[name];
  return v === undefined || v === '' ? fallback : v;
}

export function envInt(name, fallback) {
  const v = env(name, undefined);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`${name}=${v} is not a number`);
  return n;
}

function stripSlash(url) {
  return url.replace(/\/+$/, '');
}

export const META_URL = stripSlash(env('KVCM_META_URL', 'http://127.0.0.1:6382'));
export const ADMIN_URL = stripSlash(env('KVCM_ADMIN_URL', 'http://127.0.0.1:6492'));

const apiKey = env('KVCM_API_KEY', '');
const adminKey = env('KVCM_ADMIN_API_KEY', '');
const adminUser = env('KVCM_ADMIN_USER', '');
const adminPassword = env('KVCM_ADMIN_PASSWORD', '');
const account = adminUser ? `${adminUser}:${adminPassword}` : '';

/** The Authorization header of each plane, or '' to send none. */
export const AUTH = {
  meta: apiKey ? `Bearer ${apiKey}` : account ? `Bearer ${account}` : adminKey ? `Bearer ${adminKey}` : '',
  admin: adminKey ? `Bearer ${adminKey}` : account ? `Bearer ${account}` : apiKey ? `Bearer ${apiKey}` : '',
};

/** Whether any credential was given (smoke then expects 401 without one). */
export const HAS_CREDENTIALS = Boolean(apiKey || adminKey || adminUser);

/** The group the run's instances live in; `CREATE_GROUP`: setup creates it (admin plane). */
export const GROUP = env('KVCM_K6_GROUP', 'k6');
export const CREATE_GROUP = env('KVCM_K6_GROUP', '') === '';
export const STORAGE = 'k6_storage';
export const STORAGE_ROOT = env('KVCM_K6_STORAGE_ROOT', '/tmp/kvcm-k6/');
export const SPECS = envInt('KVCM_K6_SPECS', 2);
export const KEEP = env('KVCM_K6_KEEP', '') !== '';

/** Latency thresholds `p(95)<a, p(99)<b` in ms, overridable with P95_MS / P99_MS. */
export function slo(p95, p99) {
  return [`p(95)<${envInt('P95_MS', p95)}`, `p(99)<${envInt('P99_MS', p99)}`];
}

/** Thresholds every scenario shares: almost no failed requests or checks. */
export const BASE_THRESHOLDS = {
  checks: ['rate>0.99'],
  http_req_failed: ['rate<0.01'],
};

/** Seconds in a k6 duration string such as `90s`, `2m`, `1h30m` or `500ms`. */
export function seconds(duration) {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  const unit = { ms: 0.001, s: 1, m: 60, h: 3600 };
  let total = 0;
  let matched = '';
  for (let m = re.exec(duration); m; m = re.exec(duration)) {
    total += Number(m[1]) * unit[m[2]];
    matched += m[0];
  }
  if (!matched || matched !== duration) throw new Error(`not a duration: ${duration} (write e.g. 30s, 5m, 1h)`);
  return total;
}
