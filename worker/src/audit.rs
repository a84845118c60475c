//! The auditor (`kvcm-worker audit`): compares what Valkey says is stored with what the storage
//! directories hold, so that an operator — or the chaos tests — can tell that nothing was lost,
//! leaked or left stuck. It reads and never changes anything.
//!
//! What it checks, per instance of the namespace (registered or still draining):
//!
//! * **missing files**: every serving location's file exists on a file-like storage, in the
//!   directory of every spec of its spec group;
//! * **orphan files**: every file under an instance's directory belongs to a block that is
//!   serving, being written, queued for deletion (a record's `D`/`X` location, a deletion
//!   entry, a trim's trash) or dead-lettered — anything else is a leak (counted in bytes);
//! * **usage**: the per-storage counters (`usage`: bytes and blocks) equal the sums over the
//!   serving locations;
//! * **stuck deletions**: every location in state `D`/`X` has a deletion entry or a dead letter
//!   that will (or did) account for it; otherwise nothing will ever free the key;
//! * **stuck writes**: every location being written belongs to a session that is still open
//!   (else nothing finishes or expires it);
//! * **parent cycles**: no block is on a cycle of parent links (none of a cycle can ever become
//!   a leaf, so none can be evicted);
//! * and it counts what is still in flight (open sessions, `W` locations, queued deletions), which
//!   on a quiet system with workers running drains to zero.
//!
//! Run it on a quiet system (no writes in flight): a write or deletion that happens between its
//! reads of Valkey and of the directories can show as a transient difference. Mooncake and
//! tair_mem_pool storages hold no files kvcm can see: only their metadata is checked.

use crate::Worker;
use kvcm_core::backend::{Backend, group_sizes, location_specs, path_segment};
use kvcm_core::keys::InstanceKeys;
use kvcm_core::registry::Snapshot;
use kvcm_core::store::record::{BlockRecord, LocState, decode_location};
use kvcm_core::wire::InstanceInfo;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Problems of one kind shown in full; the count is always exact.
const SHOWN: usize = 50;

/// Problems of one kind: how many, and the first [`SHOWN`] described.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Problems {
    pub count: u64,
    pub shown: Vec<String>,
}

impl Problems {
    fn add(&mut self, what: String) {
        self.count += 1;
        if self.shown.len() < SHOWN {
            self.shown.push(what);
        }
    }
}

/// What an audit found.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Audit {
    pub instances: u64,
    pub serving_locations: u64,
    pub writing_locations: u64,
    pub deleting_locations: u64,
    pub open_sessions: u64,
    pub queued_deletions: u64,
    pub dead_letters: u64,
    pub files_seen: u64,
    pub missing_files: Problems,
    pub orphan_files: Problems,
    /// Bytes of the orphan files.
    pub orphan_bytes: u64,
    pub usage_mismatches: Problems,
    pub stuck_deletions: Problems,
    /// Locations being written whose write session is no longer open: nothing will finish or
    /// expire them.
    pub stuck_writes: Problems,
    /// Blocks on a cycle of parent links: none of them can become a leaf, so none is evictable.
    pub parent_cycles: Problems,
    pub unreadable_records: Problems,
}

impl Audit {
    /// No problem of any kind (in-flight work is not a problem).
    pub fn clean(&self) -> bool {
        [
            &self.missing_files,
            &self.orphan_files,
            &self.usage_mismatches,
            &self.stuck_deletions,
            &self.stuck_writes,
            &self.parent_cycles,
            &self.unreadable_records,
        ]
        .iter()
        .all(|p| p.count == 0)
    }

    /// Nothing in flight: no open session, no block being written, no deletion queued.
    pub fn drained(&self) -> bool {
        self.open_sessions == 0 && self.writing_locations == 0 && self.queued_deletions == 0
    }
}

/// One deletion entry's or dead letter's subject: a block's location, or a packed file.
struct Queued {
    key: Option<[u8; 8]>,
    file: Option<Vec<u8>>,
    loc: Vec<u8>,
}

/// Audits every instance the worker knows of (its discovery scan plus the registry).
pub async fn run(w: &Worker) -> anyhow::Result<Audit> {
    crate::discovery::refresh(w).await?;
    let snap = w.registry.snapshot();
    let mut audit = Audit::default();
    let instances = crate::discovery::instances(w);
    let mut dirs: HashMap<PathBuf, HashSet<PathBuf>> = HashMap::new(); // instance dir -> accounted files
    for instance in &instances {
        audit.instances += 1;
        instance_audit(w, &snap, instance, &mut audit, &mut dirs).await?;
    }
    // Every file under a known storage root: accounted for, or an orphan.
    let roots: Vec<String> = snap.storages.values().filter_map(|c| Backend::of(c).root().map(String::from)).collect();
    let walk = tokio::task::spawn_blocking(move || {
        let mut found = Vec::new();
        for root in roots {
            walk_root(Path::new(&root), &mut found);
        }
        found
    })
    .await?;
    let known: HashMap<PathBuf, ()> = dirs.keys().map(|d| (d.clone(), ())).collect();
    for (path, size) in walk {
        audit.files_seen += 1;
        // <root>/<instance>/<spec>/<file>
        let Some(instance_dir) = path.parent().and_then(Path::parent) else { continue };
        let accounted = dirs.get(instance_dir).is_some_and(|files| files.contains(&path));
        if !accounted {
            let why = if known.contains_key(instance_dir) { "no block accounts for it" } else { "no known instance" };
            audit.orphan_files.add(format!("{} ({size} bytes): {why}", path.display()));
            audit.orphan_bytes += size;
        }
    }
    Ok(audit)
}

/// The files under `<root>/<instance>/<spec>/`, with their sizes (the health probe's file in
/// the root itself is not one of them).
fn walk_root(root: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let Ok(instances) = std::fs::read_dir(root) else { return };
    for inst in instances.flatten() {
        if !inst.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(specs) = std::fs::read_dir(inst.path()) else { continue };
        for spec in specs.flatten() {
            if !spec.file_type().is_ok_and(|t| t.is_dir()) {
                out.push((spec.path(), spec.metadata().map(|m| m.len()).unwrap_or(0)));
                continue;
            }
            let Ok(files) = std::fs::read_dir(spec.path()) else { continue };
            for f in files.flatten() {
                out.push((f.path(), f.metadata().map(|m| m.len()).unwrap_or(0)));
            }
        }
    }
}

async fn instance_audit(
    w: &Worker,
    snap: &Snapshot,
    instance: &str,
    audit: &mut Audit,
    dirs: &mut HashMap<PathBuf, HashSet<PathBuf>>,
) -> anyhow::Result<()> {
    let keys = InstanceKeys::new(&w.config.namespace, instance);
    let mut conn = w.conn.clone();
    let info = snap.instances.get(instance).map(|i| &**i);
    let (_, mut open_seqs) = open_sessions(&mut conn, &keys).await?;
    // HSCAN may return a field twice while the hash is rehashed: once each.
    let records: Vec<(Vec<u8>, Vec<u8>)> =
        hscan(&mut conn, &keys.blocks).await?.into_iter().collect::<HashMap<_, _>>().into_iter().collect();
    let queued = stream(&mut conn, &keys.del).await?;
    let dead = stream(&mut conn, &keys.del_dead).await?;
    audit.queued_deletions += queued.len() as u64;
    audit.dead_letters += dead.len() as u64;
    // Open sessions, and the session numbers their `W` locations carry — read after the blocks
    // too (and once before them, above), so that a session that started or finished while the
    // blocks were read is known either way.
    let (open, more_seqs) = open_sessions(&mut conn, &keys).await?;
    audit.open_sessions += open;
    open_seqs.extend(more_seqs);
    // Trims not yet expanded: their trash hashes hold whole records.
    let mut trashed = Vec::new();
    for (_, fields) in queued.iter().chain(&dead) {
        if let Some(trash) = fields.get("trash") {
            trashed.extend(hscan(&mut conn, &String::from_utf8_lossy(trash)).await?);
        }
    }
    let usage: HashMap<String, i64> = redis::cmd("HGETALL").arg(&keys.usage).query_async(&mut conn).await?;

    // What deletion entries and dead letters name.
    let subjects: Vec<Queued> = queued.iter().chain(&dead).filter_map(|(_, f)| subject(f)).collect();
    let queued_locs: HashSet<(Vec<u8>, Vec<u8>)> = subjects
        .iter()
        .filter_map(|q| q.key.map(|k| (k.to_vec(), q.loc.get(1..).unwrap_or_default().to_vec())))
        .collect();

    // The instance's own directories, so that files in them count as its (accounted or not).
    for cfg in snap.storages.values() {
        if let Some(dir) = Backend::of(cfg).instance_dir(instance) {
            dirs.entry(PathBuf::from(dir)).or_default();
        }
    }
    let mut acc = Accounting { instance, info, snap, files: HashSet::new() };
    let mut serving: BTreeMap<u16, (i64, i64)> = BTreeMap::new();
    let sizes = info.map(group_sizes).unwrap_or_default();
    for (field, raw) in &records {
        let Some(key) = field.as_slice().try_into().ok().map(i64::from_be_bytes) else {
            audit.unreadable_records.add(format!("{instance}: a block field of {} bytes", field.len()));
            continue;
        };
        let Some(rec) = BlockRecord::decode(raw) else {
            audit.unreadable_records.add(format!("{instance}: block {key:016x} has an undecodable record"));
            continue;
        };
        let mut p = 11;
        for loc in &rec.locations {
            let len = decode_location(raw, p).map(|(_, l)| l).unwrap_or(14);
            let loc_bytes = &raw[p..p + len];
            p += len;
            let paths = acc.account(key, loc);
            match loc.state {
                LocState::Serving => {
                    audit.serving_locations += 1;
                    let e = serving.entry(loc.storage).or_default();
                    e.0 += sizes.get(loc.group as usize).copied().unwrap_or(0);
                    e.1 += 1;
                    for path in paths.iter().filter(|p| !p.exists()) {
                        audit.missing_files.add(format!("{instance}: block {key:016x} serves {}", path.display()));
                    }
                }
                LocState::Writing => {
                    audit.writing_locations += 1;
                    if !open_seqs.contains(&loc.seq) {
                        audit.stuck_writes.add(format!(
                            "{instance}: block {key:016x} is being written by session number {} which is not open",
                            loc.seq
                        ));
                    }
                }
                LocState::Deleting => {
                    audit.deleting_locations += 1;
                    if !queued_locs.contains(&(field.clone(), loc_bytes[1..].to_vec())) {
                        audit.stuck_deletions.add(format!(
                            "{instance}: block {key:016x} is being deleted ({}) but no deletion entry or dead \
                             letter names it",
                            loc_bytes[0] as char
                        ));
                    }
                }
            }
        }
    }
    let parents: HashMap<i64, i64> = records
        .iter()
        .filter_map(|(f, raw)| {
            let key = i64::from_be_bytes(f.as_slice().try_into().ok()?);
            Some((key, BlockRecord::decode(raw)?.parent?))
        })
        .collect();
    for key in on_cycles(&parents) {
        audit.parent_cycles.add(format!("{instance}: block {key:016x} is on a cycle of parent links"));
    }
    for (field, raw) in &trashed {
        let (Some(key), Some(rec)) =
            (field.as_slice().try_into().ok().map(i64::from_be_bytes), BlockRecord::decode(raw))
        else {
            continue;
        };
        for loc in &rec.locations {
            acc.account(key, loc);
        }
    }
    for q in &subjects {
        let Some((loc, _)) = decode_location(&q.loc, 0) else { continue };
        match (&q.key, &q.file) {
            (Some(k), _) => {
                acc.account(i64::from_be_bytes(*k), &loc);
            }
            (None, Some(_)) => {
                acc.account(0, &loc); // a packed file's name comes from its location
            }
            _ => {}
        }
    }
    // Usage counters against the serving locations (only known for registered instances).
    if info.is_some() {
        let mut ids: HashSet<u16> = serving.keys().copied().collect();
        ids.extend(usage.keys().filter_map(|f| f.get(1..)?.parse::<u16>().ok()));
        for id in ids {
            let (bytes, blocks) = serving.get(&id).copied().unwrap_or_default();
            let (ub, un) = (
                usage.get(&format!("b{id}")).copied().unwrap_or(0),
                usage.get(&format!("n{id}")).copied().unwrap_or(0),
            );
            if (ub, un) != (bytes, blocks) {
                audit.usage_mismatches.add(format!(
                    "{instance}: storage id {id} counts {ub} bytes in {un} blocks; its serving locations hold {bytes} \
                     bytes in {blocks}"
                ));
            }
        }
    }
    for (dir, files) in acc.by_dir() {
        dirs.entry(dir).or_default().extend(files);
    }
    Ok(())
}

/// The files a location occupies, collected per instance directory.
struct Accounting<'a> {
    instance: &'a str,
    info: Option<&'a InstanceInfo>,
    snap: &'a Snapshot,
    files: HashSet<PathBuf>,
}

impl Accounting<'_> {
    /// Accounts for a location's files and returns them (empty for storages without files).
    fn account(&mut self, key: i64, loc: &kvcm_core::store::record::Location) -> Vec<PathBuf> {
        let Some(cfg) = kvcm_core::store::storage_of(self.snap, loc.storage) else { return Vec::new() };
        let Some(dir) = Backend::of(cfg).instance_dir(self.instance) else { return Vec::new() };
        let name = Backend::file_name(key, loc);
        let in_dirs = |specs: Vec<String>| -> Vec<PathBuf> {
            specs.iter().map(|s| Path::new(&dir).join(s).join(&name)).collect()
        };
        // A removed instance's specs are unknown: its file counts in whichever spec holds it.
        let listed = || -> Vec<String> {
            std::fs::read_dir(&dir)
                .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default()
        };
        let own: Vec<PathBuf> = match self.info {
            Some(info) => {
                in_dirs(location_specs(info, loc.group).iter().map(|(s, _)| path_segment(s).into_owned()).collect())
            }
            None => in_dirs(listed()),
        };
        // A packed file is shared by blocks of several spec groups and goes from every spec
        // directory only with its last block: it is accounted for wherever it is.
        if loc.packed.is_some() {
            let all = match self.info {
                Some(info) => info.location_spec_infos.iter().map(|s| path_segment(&s.name).into_owned()).collect(),
                None => listed(),
            };
            self.files.extend(in_dirs(all));
        }
        self.files.extend(own.iter().cloned());
        own
    }

    fn by_dir(self) -> HashMap<PathBuf, HashSet<PathBuf>> {
        let mut out: HashMap<PathBuf, HashSet<PathBuf>> = HashMap::new();
        for f in self.files {
            if let Some(dir) = f.parent().and_then(Path::parent) {
                out.entry(dir.to_path_buf()).or_default().insert(f);
            }
        }
        out
    }
}

/// The blocks on a cycle of parent links (each reported once).
fn on_cycles(parents: &HashMap<i64, i64>) -> Vec<i64> {
    // 0: not seen, 1: on the current walk, 2: done.
    let mut state: HashMap<i64, u8> = HashMap::new();
    let mut found = Vec::new();
    for &start in parents.keys() {
        let mut path = Vec::new();
        let mut at = Some(start);
        while let Some(k) = at {
            match state.get(&k).copied().unwrap_or(0) {
                2 => break,
                1 => {
                    // The walk came back to k: the blocks from k on are a cycle.
                    let from = path.iter().position(|p| *p == k).unwrap_or(0);
                    found.extend_from_slice(&path[from..]);
                    break;
                }
                _ => {
                    state.insert(k, 1);
                    path.push(k);
                    at = parents.get(&k).copied();
                }
            }
        }
        for k in path {
            state.insert(k, 2);
        }
    }
    found
}

fn subject(fields: &HashMap<String, Vec<u8>>) -> Option<Queued> {
    let loc = fields.get("l")?.clone();
    let key = fields.get("k").and_then(|k| <[u8; 8]>::try_from(k.as_slice()).ok());
    Some(Queued { key, file: fields.get("f").cloned(), loc })
}

/// How many write sessions of the instance are open, and their session numbers.
async fn open_sessions(
    conn: &mut redis::cluster_async::ClusterConnection,
    keys: &InstanceKeys,
) -> anyhow::Result<(u64, HashSet<u32>)> {
    let ids: Vec<String> = redis::cmd("ZRANGE").arg(&keys.sessions).arg(0).arg(-1).query_async(conn).await?;
    let mut seqs = HashSet::new();
    for id in &ids {
        let rec: Option<Vec<u8>> = redis::cmd("GET").arg(keys.session(id)).query_async(conn).await?;
        if let Some(seq) = rec.as_deref().and_then(|r| r.get(..4)) {
            seqs.insert(u32::from_le_bytes([seq[0], seq[1], seq[2], seq[3]]));
        }
    }
    Ok((ids.len() as u64, seqs))
}

/// A hash's fields and values.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Every field and value of a hash, by HSCAN (a large hash is never read in one reply).
async fn hscan(conn: &mut redis::cluster_async::ClusterConnection, key: &str) -> anyhow::Result<Pairs> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, page): (u64, Pairs) =
            redis::cmd("HSCAN").arg(key).arg(cursor).arg("COUNT").arg(1000).query_async(conn).await?;
        out.extend(page);
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

/// Every entry of a stream, in pages.
async fn stream(
    conn: &mut redis::cluster_async::ClusterConnection,
    key: &str,
) -> anyhow::Result<Vec<(String, HashMap<String, Vec<u8>>)>> {
    let mut out = Vec::new();
    let mut start = "-".to_string();
    loop {
        let page: redis::streams::StreamRangeReply =
            redis::cmd("XRANGE").arg(key).arg(&start).arg("+").arg("COUNT").arg(1000).query_async(conn).await?;
        let n = page.ids.len();
        for e in page.ids {
            start = format!("({}", e.id);
            let id = e.id.clone();
            out.push((id, kvcm_core::store::entry_fields(e)));
        }
        if n < 1000 {
            return Ok(out);
        }
    }
}
