// What a run needs before its load: a ready server, a group to put instances in, registered
// (and, for reads, warm) instances — and what it removes afterwards.
//
// With KVCM_K6_GROUP unset, setup creates the `file`-like NFS storage `k6_storage` and the group
// `k6` through the admin plane (both idempotent across runs: DUPLICATE_ENTITY is fine). With it
// set, the admin plane is never called: instances are registered in that group through the meta
// plane, which an engine key scoped to the group may do.

import { check, fail } from 'k6';
import { call, codeOf, must, waitHealthy } from './rpc.js';
import { CREATE_GROUP, GROUP, KEEP, SPECS, STORAGE, STORAGE_ROOT, env } from './config.js';
import { writeSession } from './engine.js';
import { extend, systemPrompt } from './keys.js';

/** A run id unique enough to keep runs' instances and keys apart (KVCM_K6_RUN to choose). */
export function runId() {
  return env('KVCM_K6_RUN', `${Date.now().toString(36)}${Math.floor(Math.random() * 1296).toString(36)}`);
}

function createOrKeep(rpc, body) {
  const { reply } = call('admin', rpc, body, { code: null });
  const code = codeOf(reply);
  if (!check(reply, { [`admin ${rpc}: OK or DUPLICATE_ENTITY`]: () => code === 'OK' || code === 'DUPLICATE_ENTITY' })) {
    fail(`admin ${rpc} failed: ${JSON.stringify(reply)}`);
  }
}

/** An NFS storage config named `name` at `root` (a directory the workers can write: they probe
 * it, and a storage failing its probe takes no new blocks). */
export function storageConfig(name, root = STORAGE_ROOT) {
  return { global_unique_name: name, nfs: { root_path: root.replace(/\/*$/, '/'), key_count_per_file: 1 } };
}

/** An instance group on `storage` with a quota no load test fills (1 PiB). */
export function groupConfig(name, storage) {
  const pib = '1125899906842624';
  return {
    name,
    storage_candidates: [storage],
    quota: { capacity: pib, quota_config: [{ storage_type: 'ST_NFS', capacity: pib }] },
    cache_config: { reclaim_strategy: { reclaim_policy: 'POLICY_LRU', trigger_strategy: { used_percentage: 0.9 } } },
    version: 1,
  };
}

/** The registerInstance body of instance `id` in `group`: 16-token blocks, SPECS specs of 1 MiB. */
export function registration(group, id) {
  const specs = [];
  for (let i = 0; i < SPECS; i++) specs.push({ name: `tp${i}`, size: 1048576 });
  return {
    trace_id: `k6-register-${id}`,
    instance_group: group,
    instance_id: id,
    block_size: 16,
    location_spec_infos: specs,
    model_deployment: { model_name: 'k6-llm-70b', dtype: 'bf16', tp_size: SPECS },
  };
}

/**
 * Everything a scenario's setup() starts with: fails fast unless the server is healthy, makes
 * sure the group exists, registers `instances` instances; returns `{run, instances}`.
 */
export function prepare(instances) {
  waitHealthy();
  if (CREATE_GROUP) {
    createOrKeep('addStorage', { storage: storageConfig(STORAGE) });
    createOrKeep('createInstanceGroup', { instance_group: groupConfig(GROUP, STORAGE) });
  }
  const run = runId();
  const ids = [];
  for (let i = 0; i < instances; i++) {
    const id = `k6-${run}-${i}`;
    must('meta', 'registerInstance', registration(GROUP, id));
    ids.push(id);
  }
  return { run, instances: ids };
}

/**
 * Writes and finishes `prompts` system prompts of `blocks` blocks on every instance (so that
 * conversations start on a warm shared prefix), then `docs` documents per instance that continue
 * them to `docBlocks` blocks. Returns, per instance, the documents' key lists.
 */
export function warm(data, { prompts, blocks, docs = 0, docBlocks = 0 }) {
  const out = {};
  for (const id of data.instances) {
    const sys = [];
    for (let p = 0; p < prompts; p++) {
      sys.push(systemPrompt(data.run, id, p, blocks));
      if (!writeSession(id, sys[p].keys, { tags: { phase: 'setup' } }).ok) fail(`could not warm ${id}`);
    }
    out[id] = [];
    for (let d = 0; d < docs; d++) {
      const doc = extend(sys[d % prompts], `doc-${d}`, docBlocks - blocks);
      if (!writeSession(id, doc.keys, { tags: { phase: 'setup' } }).ok) fail(`could not warm ${id}`);
      out[id].push(doc.keys);
    }
  }
  return out;
}

/** Removes the run's instances (admin removeInstance), or trims their cache when the run may not
 * use the admin plane. KVCM_K6_KEEP=1 keeps everything. */
export function cleanup(data) {
  if (KEEP || !data) return;
  for (const id of data.instances) {
    if (CREATE_GROUP) call('admin', 'removeInstance', { instance_group: GROUP, instance_id: id }, { tags: { phase: 'teardown' } });
    else call('meta', 'trimCache', { instance_id: id, strategy: 'TS_REMOVE_ALL_CACHE' }, { tags: { phase: 'teardown' } });
  }
}
