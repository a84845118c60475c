// smoke — does every RPC of both planes answer, with the Tair header and the right code?
//
// One VU, one iteration, no load: each RPC of the meta plane (on an instance registered in
// setup) and of the admin plane (on a storage, group, instance, account and API key of its own,
// removed again) once, plus the plain-HTTP routes and a few refusals (no credentials, bad
// JSON, unknown instance, unknown session). Every reply is checked for its HTTP status, the Tair
// header and its status code; the threshold is that every check passes, so any failure makes k6
// exit non-zero. `make test` runs it against a stack with auth on (tests/tests/k6.rs).
//
// Needs the admin plane: an admin account (KVCM_ADMIN_USER / KVCM_ADMIN_PASSWORD), a ROLE_ADMIN
// key, or a loopback admin plane with no admin yet.

import http from 'k6/http';
import { check, group } from 'k6';
import { ADMIN_URL, AUTH, GROUP, HAS_CREDENTIALS, META_URL, SPECS, STORAGE_ROOT } from '../lib/config.js';
import { call, codeOf, hasTairHeader, must } from '../lib/rpc.js';
import { extend, root } from '../lib/keys.js';
import { cleanup, groupConfig, prepare, registration, storageConfig } from '../lib/setup.js';
import { SUMMARY_TREND_STATS, summaryFor } from '../lib/summary.js';

export const options = {
  vus: 1,
  iterations: 1,
  summaryTrendStats: SUMMARY_TREND_STATS,
  thresholds: { checks: ['rate==1'], http_req_failed: ['rate==0'] },
};

export function setup() {
  const data = prepare(1);
  // Smoke needs the admin plane: stop here, saying so, rather than fail half its checks.
  must('admin', 'checkHealth', {});
  return data;
}

function uris(location) {
  return (location.location_specs || []).map((s) => s.uri);
}

function metaPlane(id, run) {
  call('meta', 'registerInstance', registration(GROUP, id));
  const info = call('meta', 'getInstanceInfo', { instance_id: id }).reply;
  check(info, {
    'getInstanceInfo: the registered instance and its group': (r) =>
      r.instance_group === GROUP && r.instance_info.instance_id === id && r.instance_info.block_size === 16,
  });

  const keys = extend(root(`${run}/smoke`), 'prompt', 5).keys;
  const written = keys.slice(0, 4);
  const start = call('meta', 'startWriteCache', { instance_id: id, block_keys: written, write_timeout_seconds: 30 }).reply;
  check(start, {
    'startWriteCache: a session, nothing masked, 4 locations with a URI per spec': (r) =>
      r.write_session_id.length > 0 && (r.block_mask.offset || 0) === 0 && r.locations.length === 4 &&
      r.locations.every((l) => l.location_specs.length === SPECS && uris(l).every((u) => u.length > 0)),
  });
  call('meta', 'finishWriteCache', { instance_id: id, write_session_id: start.write_session_id, success_blocks: { offset: 4 } });

  const prefix = call('meta', 'getCacheLocation', { instance_id: id, query_type: 'QT_PREFIX_MATCH', block_keys: keys }).reply;
  check(prefix, {
    'getCacheLocation prefix: the 4 written blocks, at the URIs startWriteCache gave': (r) =>
      r.locations.length === 4 && r.locations.every((l, i) => JSON.stringify(uris(l)) === JSON.stringify(uris(start.locations[i]))),
  });
  const batch = call('meta', 'getCacheLocation', { instance_id: id, query_type: 'QT_BATCH_GET', block_keys: keys }).reply;
  check(batch, {
    'getCacheLocation batch: 5 entries, the unwritten one a placeholder': (r) =>
      r.locations.length === 5 && uris(r.locations[4]).every((u) => u === '') && uris(r.locations[0]).every((u) => u !== ''),
  });
  const len = call('meta', 'getCacheLocationLen', { instance_id: id, query_type: 'QT_PREFIX_MATCH', block_keys: keys }).reply;
  check(len, { 'getCacheLocationLen: the 4 written blocks match': (r) => r.cache_location_len === '4' });
  const cluster = call('meta', 'getClusterInfo', { instance_id: id }).reply;
  check(cluster, { 'getClusterInfo: this frontend serves (no leader)': (r) => r.leader_node_id === r.self_node_id });
  // An engine reports what its own GPU tier holds; a router asks who holds the prefix.
  const host = `smoke-${id}:9600`;
  const reported = call('meta', 'reportEvent', {
    instance_id: id, host_ip_port: host, storage_type: 'ST_EVENT_REPORT_L1P5',
    events: [
      { event_type: 'EVENT_HEARTBEAT', heartbeat: {} },
      ...written.slice(0, 2).map((k) => ({
        event_type: 'EVENT_BLOCK_ADD',
        block_add: { block_key: String(k), medium: 'gpu', specs: [{ name: 'tp0', uri: `event_report://${host}/gpu/${k}` }] },
      })),
    ],
  }).reply;
  check(reported, { 'reportEvent: every event OK, a generation started': (r) => r.item_results.length === 0 && r.committed_snapshot_version.length === 32 });
  const hosts = call('meta', 'getHostCacheState', { instance_id: id, query_type: 'QT_PREFIX_MATCH', block_cache_keys: keys }).reply;
  check(hosts, { 'getHostCacheState: the reporting host holds the first 2 blocks': (r) => r.hosts.length === 1 && r.hosts[0].local === '2' });
  const byBackend = call('meta', 'getCacheLocationsByBackend', {
    instance_id: id, query_type: 'QT_PREFIX_MATCH', block_keys: keys, backend_selectors: [{ backend_type: 'ST_EVENT_REPORT_L1P5' }],
  }).reply;
  check(byBackend, { 'getCacheLocationsByBackend: the reported engine tier holds the first 2 blocks': (r) => r.key_locations.length === 2 });
  // The engine goes away: its blocks leave the answers at once (what follows reads kvcm's own).
  call('meta', 'reportEvent', { instance_id: id, host_ip_port: host, storage_type: 'ST_EVENT_REPORT_L1P5', events: [{ event_type: 'EVENT_HOST_DOWN', host_down: {} }] });
  const meta = call('meta', 'getCacheMeta', { instance_id: id, block_keys: written, detail_level: 1 }).reply;
  check(meta, { 'getCacheMeta: 4 serving blocks': (r) => r.metas.length === 4 && r.metas.every((m) => m.includes('CLS_SERVING')) });

  call('meta', 'removeCache', { instance_id: id, block_keys: [written[3]] });
  const after = call('meta', 'getCacheLocation', { instance_id: id, query_type: 'QT_PREFIX_MATCH', block_keys: keys }).reply;
  check(after, { 'removeCache: the removed block no longer hits': (r) => r.locations.length === 3 });
  call('meta', 'trimCache', { instance_id: id, strategy: 'TS_REMOVE_ALL_CACHE' });
  const trimmed = call('meta', 'getCacheLocation', { instance_id: id, query_type: 'QT_PREFIX_MATCH', block_keys: keys }).reply;
  check(trimmed, { 'trimCache: nothing hits': (r) => r.locations.length === 0 });

  call('meta', 'getCacheLocation', { instance_id: `${id}-never-registered`, query_type: 'QT_PREFIX_MATCH', block_keys: keys }, { code: 'INSTANCE_NOT_EXIST' });
  const unknown = call('meta', 'finishWriteCache', { instance_id: id, write_session_id: '00000000000000ff', success_blocks: { offset: 0 } }, { code: null }).reply;
  check(unknown, { 'finishWriteCache of an unknown session: a non-OK code': (r) => codeOf(r) !== '' && codeOf(r) !== 'OK' });
}

function storagesAndGroups(id, run) {
  const storage = `k6-smoke-${run}`;
  const groupName = `k6-smoke-${run}`;
  const instance = `k6-smoke-${run}`;
  const cfg = storageConfig(storage, `${STORAGE_ROOT.replace(/\/*$/, '')}-smoke-${run}/`);
  call('admin', 'addStorage', { storage: cfg });
  call('admin', 'addStorage', { storage: cfg }); // the same storage again: idempotent
  const other = storageConfig(storage, `${STORAGE_ROOT.replace(/\/*$/, '')}-smoke-${run}-other/`);
  call('admin', 'addStorage', { storage: other }, { code: 'DUPLICATE_ENTITY' });
  call('admin', 'updateStorage', { storage: Object.assign({}, cfg, { check_storage_available_when_open: true }) });
  call('admin', 'disableStorage', { storage_unique_name: storage });
  const listed = call('admin', 'listStorage', {}).reply;
  check(listed, {
    'listStorage: the new storage, updated and disabled': (r) =>
      r.storage.some((s) => s.global_unique_name === storage && s.check_storage_available_when_open === true && s.is_available === false),
  });
  call('admin', 'enableStorage', { storage_unique_name: storage });

  call('admin', 'createInstanceGroup', { instance_group: groupConfig(groupName, storage) });
  const got = call('admin', 'getInstanceGroup', { name: groupName }).reply;
  const version = Number(got.instance_group.version);
  const updated = Object.assign({}, got.instance_group, { user_data: 'k6 smoke', version: version + 1 });
  call('admin', 'updateInstanceGroup', { instance_group: updated, current_version: version });
  const groups = call('admin', 'listInstanceGroup', {}).reply;
  check(groups, {
    'listInstanceGroup: the new group at its new version': (r) =>
      r.instance_group.some((g) => g.name === groupName && Number(g.version) === version + 1 && g.user_data === 'k6 smoke'),
  });

  call('admin', 'registerInstance', registration(groupName, instance));
  call('admin', 'getInstanceInfo', { instance_id: instance });
  const instances = call('admin', 'listInstanceInfo', { instance_group_name: groupName }).reply;
  check(instances, { 'listInstanceInfo: the one instance of the group': (r) => r.instance_info.length === 1 && r.instance_info[0].instance_id === instance });

  call('admin', 'getCacheMeta', { instance_id: id, block_keys: ['1', '2'] });
  call('admin', 'removeCache', { instance_id: id, block_keys: ['1', '2'] });
  const dead = call('admin', 'listDeadLetters', { instance_id: instance, limit: 10 }).reply;
  check(dead, { 'listDeadLetters: none for a healthy new instance': (r) => r.dead_letters.length === 0 && Number(r.total) === 0 });
  const redriven = call('admin', 'redriveDeadLetters', { instance_id: instance, ids: ['1-0'] }).reply;
  check(redriven, { 'redriveDeadLetters: an id that is no dead letter is counted, not an error': (r) => Number(r.not_found) === 1 });

  call('admin', 'removeInstance', { instance_group: groupName, instance_id: instance });
  call('admin', 'removeInstanceGroup', { name: groupName });
  call('admin', 'removeStorage', { storage_unique_name: storage });
  const gone = call('admin', 'listStorage', {}).reply;
  check(gone, { 'removeStorage: gone from listStorage': (r) => !r.storage.some((s) => s.global_unique_name === storage) });
}

function accountsAndKeys(id, run, metaAuthOn) {
  const user = `k6-user-${run}`;
  const password = `k6-pass-${run}-${Math.floor(Math.random() * 1e9)}`;
  const account = { user_name: user, password, role: 'ROLE_USER', instance_groups: [GROUP] };
  if (HAS_CREDENTIALS) {
    call('admin', 'addAccount', account);
    const accounts = call('admin', 'listAccount', {}).reply;
    check(accounts, { 'listAccount: the new account, scoped': (r) => r.accounts.some((a) => a.user_name === user && a.role === 'ROLE_USER') });
    call('meta', 'getInstanceInfo', { instance_id: id }, { auth: `Bearer ${user}:${password}` });
    call('admin', 'deleteAccount', { user_name: user });
  } else {
    // An open admin plane (loopback, no admin yet, as `make run` starts): the first account must
    // be an admin, and adding one would close the plane for good — so only see the refusals.
    const refused = call('admin', 'addAccount', account, { code: 'INVALID_ARGUMENT' }).reply;
    check(refused, { 'addAccount on an open admin plane: the first account must be an admin': (r) => r.header.status.message.includes('ROLE_ADMIN') });
    call('admin', 'listAccount', {});
    call('admin', 'deleteAccount', { user_name: user }, { code: 'INVALID_ARGUMENT' });
  }

  const created = call('admin', 'createApiKey', { name: `k6-smoke-${run}`, role: 'ROLE_USER', instance_groups: [GROUP] }).reply;
  const token = created.token || '';
  check(created, { 'createApiKey: a kvcm_ token': () => token.startsWith('kvcm_') });
  call('meta', 'getInstanceInfo', { instance_id: id }, { auth: `Bearer ${token}` });
  const keys = call('admin', 'listApiKeys', {}).reply;
  check(keys, {
    'listApiKeys: the new key, without its token': (r) =>
      r.api_keys.some((k) => k.key_id === created.api_key.key_id) && !JSON.stringify(r).includes(token),
  });
  call('admin', 'revokeApiKey', { key_id: created.api_key.key_id });
  if (metaAuthOn) {
    call('meta', 'getInstanceInfo', { instance_id: id }, { auth: `Bearer ${token}`, status: 401, code: null });
  }
}

function cluster() {
  call('admin', 'getMetrics', {});
  const health = call('admin', 'checkHealth', {}).reply;
  check(health, { 'checkHealth: healthy': (r) => r.is_health === true });
  call('admin', 'getManagerClusterInfo', {});
  call('admin', 'leaderDemote', {}, { code: 'UNSUPPORTED' });
  // Tair's debug service: off on a served frontend (debug_faults = false).
  call('admin', 'injectFault', { api_name: 'GetCacheLocation', fault_trigger_strategy: 'ALWAYS' }, { code: 'UNSUPPORTED' });
  call('admin', 'removeFault', { api_name: 'GetCacheLocation' }, { code: 'UNSUPPORTED' });
  call('admin', 'clearFaults', {}, { code: 'UNSUPPORTED' });
  call('admin', 'getLeaderElectorConfig', {}, { code: 'UNSUPPORTED' });
  call('admin', 'updateLeaderElectorConfig', { campaign_delay_time_ms: 1000 }, { code: 'UNSUPPORTED' });
  // The level this frontend already logs at: the smoke test changes nothing.
  call('admin', 'updateLogger', { log_level: 'INFO' });
  call('admin', 'updateLogger', { log_level: 'LOUD' }, { code: 'INVALID_ARGUMENT' });
  const snapshot = call('admin', 'genConfigSnapshot', {}).reply;
  check(snapshot, { 'genConfigSnapshot: a kvcm config snapshot': (r) => JSON.parse(r.config_snapshot).kvcm_config_snapshot === 1 });
  // Loading what is there creates nothing and changes nothing.
  call('admin', 'loadConfigSnapshot', { config_snapshot: snapshot.config_snapshot });
}

function plainHttp() {
  for (const [plane, base] of [['meta', META_URL], ['admin', ADMIN_URL]]) {
    const doc = http.get(`${base}/openapi.json`, { tags: { plane, rpc: 'openapi.json', name: `${plane}/openapi.json` } });
    check(doc, { [`${plane} GET /openapi.json: an OpenAPI 3.1 description`]: (r) => r.status === 200 && String(r.json('openapi')).startsWith('3.1') });
  }
  const metrics = http.get(`${ADMIN_URL}/metrics`, { tags: { plane: 'admin', rpc: 'metrics', name: 'admin/metrics' } });
  check(metrics, { 'admin GET /metrics: Prometheus text with kvcm series': (r) => r.status === 200 && r.body.includes('kvcm_http_requests_total') });
  const headers = { 'Content-Type': 'application/json' };
  if (AUTH.meta) headers.Authorization = AUTH.meta;
  const bad = http.post(`${META_URL}/api/getCacheLocation`, '{"instance_id": ', {
    headers,
    tags: { plane: 'meta', rpc: 'getCacheLocation', name: 'meta/badjson' },
    responseCallback: http.expectedStatuses(400),
  });
  check(bad, { 'meta unparsable JSON: HTTP 400 with the Tair header': (r) => r.status === 400 && hasTairHeader(JSON.parse(r.body)) });
  if (HAS_CREDENTIALS) call('admin', 'listStorage', {}, { auth: '', status: 401, code: null });
}

export default function (data) {
  const id = data.instances[0];
  // Whether the meta plane wants credentials (decides what a revoked key must get).
  const probe = http.post(`${META_URL}/api/getInstanceInfo`, JSON.stringify({ instance_id: id }), {
    headers: { 'Content-Type': 'application/json' },
    tags: { plane: 'meta', rpc: 'getInstanceInfo', name: 'meta/probe' },
    responseCallback: http.expectedStatuses(200, 401),
  });
  const metaAuthOn = probe.status === 401;
  group('meta plane', () => metaPlane(id, data.run));
  group('admin: storages, groups, instances, cache', () => storagesAndGroups(id, data.run));
  group('admin: accounts and API keys', () => accountsAndKeys(id, data.run, metaAuthOn));
  group('admin: cluster', cluster);
  group('plain HTTP and refusals', plainHttp);
}

export function teardown(data) {
  cleanup(data);
}

export const handleSummary = summaryFor('smoke');
