-- registry_snapshot: read the whole registry atomically (one consistent version).
--
-- KEYS[1] version            string counter
-- KEYS[2] storages           hash name -> StorageConfig JSON
-- KEYS[3] storages_disabled  set of disabled storage names
-- KEYS[4] groups             hash name -> InstanceGroup JSON
-- KEYS[5] group_instances    hash group -> instance count (not returned)
-- KEYS[6] instances          hash id -> InstanceInfo JSON
-- KEYS[7] instance_fp        hash id -> registration fingerprint (not returned)
-- KEYS[8] accounts           hash user -> account JSON
-- KEYS[9] storage_ids        hash name -> numeric storage id
-- KEYS[10] storage_id_seq    counter (not returned)
-- KEYS[11] storages_unhealthy set of storages that failed their last health check
-- KEYS[12] api_keys          hash key id -> API key JSON (digest of the token, never the token)
-- KEYS[13] storage_health    hash storage/worker -> last verdict (not returned)
-- ARGV    none
--
-- Reply: {1, version, storages_flat, disabled, groups_flat, instances_flat, accounts_flat, ids_flat,
--         unhealthy, api_keys_flat}
--   where *_flat are HGETALL-style [field, value, field, value, ...] arrays.
-- Status codes: 1 only (read-only).
-- Example: empty registry -> {1, "0", {}, {}, {}, {}, {}, {}, {}, {}}.
if #KEYS ~= 13 then return redis.error_reply('registry_snapshot: expected 13 keys') end
return {
  1,
  redis.call('GET', KEYS[1]) or '0',
  redis.call('HGETALL', KEYS[2]),
  redis.call('SMEMBERS', KEYS[3]),
  redis.call('HGETALL', KEYS[4]),
  redis.call('HGETALL', KEYS[6]),
  redis.call('HGETALL', KEYS[8]),
  redis.call('HGETALL', KEYS[9]),
  redis.call('SMEMBERS', KEYS[11]),
  redis.call('HGETALL', KEYS[12]),
}
