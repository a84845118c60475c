//! ReportEvent: what engines report holding in their own cache tiers (docs/events.md). A
//! reporter is `instance_id + storage_type + host_ip_port`; its liveness, lifecycle epoch,
//! generation and every block it reports live in the instance's slot (`lua/report_event.lua`),
//! so any frontend accepts any reporter's events and a restart loses nothing.
//!
//! Every field is checked here before the script runs. Request-level faults (a storage type
//! that is not an event-report one, a bad `host_ip_port`, a forbidden combination of events)
//! refuse the whole request; an item-level fault (a payload that does not match its
//! `event_type`, a bad key, medium, spec or URI) fails that item with `INVALID_ARGUMENT` and the
//! others go on, as in Tair: the request is not a transaction, `item_results` says what happened
//! to each item.

use super::DataPlane;
use crate::error::{Error, Result};
use crate::keys::block_field;
use crate::limits::Limits;
use crate::scripts;
use crate::wire::StatusCode;
use crate::wire::common::{LocationSpec, StorageType};
use crate::wire::meta::{EventRef, ReportEventBody, ReportEventType, SpecRef};
use std::borrow::Cow;
use std::sync::Arc;

/// Longest medium name ("gpu", "mem", "disk"…).
pub const MAX_MEDIUM_BYTES: usize = 64;
/// Longest URI of one reported spec (stored with a 16-bit length).
pub const MAX_URI_BYTES: usize = 2048;
/// Longest spec name (stored with an 8-bit length).
pub const MAX_SPEC_NAME_BYTES: usize = 255;
/// Longest `host_ip_port`.
pub const MAX_HOST_BYTES: usize = 255;
/// Most specs of one reported block (stored with an 8-bit count).
pub const MAX_SPECS: usize = 255;

/// Liveness and snapshot settings (config keys `event_report_*`; the defaults are theirs).
#[derive(Debug, Clone, Copy)]
pub struct ReportSettings {
    /// A reporter without a heartbeat this long is hidden from queries.
    pub heartbeat_timeout_ms: u64,
    /// A reporter without a heartbeat this long is unregistered (its next events need a
    /// NODE_REGISTER first).
    pub cleanup_grace_ms: u64,
    /// Least time between two committed snapshots of one reporter.
    pub snapshot_min_interval_ms: u64,
}

/// How long each tier's reporters stay live without a heartbeat (reads apply it).
#[derive(Debug, Clone, Copy)]
pub struct Liveness {
    pub l1p5_ms: u64,
    pub l2_ms: u64,
}

/// The settings of `tier`'s reporters of instances of `group`: the group's event-report storage
/// of that tier (`event_report_storage_candidates`; its zero fields fall back to `defaults`), or
/// `defaults` when the group lists none. A group that lists some but none of this tier, two of
/// it, or a disabled one refuses the tier's events (Tair's routing).
pub fn settings_for(
    snap: &crate::registry::Snapshot,
    group: &str,
    tier: StorageType,
    defaults: ReportSettings,
) -> Result<ReportSettings> {
    let Some(g) = snap.groups.get(group) else { return Ok(defaults) };
    if g.event_report_storage_candidates.is_empty() {
        return Ok(defaults);
    }
    let matching: Vec<&crate::wire::admin::StorageConfig> = g
        .event_report_storage_candidates
        .iter()
        .filter_map(|name| snap.storages.get(name))
        .filter(|s| s.event_report.is_some() && s.declared_type == tier)
        .collect();
    let cfg = match matching.as_slice() {
        [one] => *one,
        [] => {
            return Err(Error::invalid(format!(
                "instance group '{group}' has no event-report storage of type {tier} among its \
                 event_report_storage_candidates"
            )));
        }
        _ => {
            return Err(Error::invalid(format!(
                "instance group '{group}' lists several event-report storages of type {tier}; keep one"
            )));
        }
    };
    if !cfg.is_available {
        return Err(Error::invalid(format!(
            "event-report storage '{}' is disabled (enableStorage)",
            cfg.global_unique_name
        )));
    }
    let spec = cfg.event_report.clone().unwrap_or_default();
    let or = |v: i64, d: u64| if v > 0 { v as u64 } else { d };
    let heartbeat_timeout_ms = or(spec.heartbeat_timeout_ms, defaults.heartbeat_timeout_ms);
    Ok(ReportSettings {
        heartbeat_timeout_ms,
        // Never unregistered before it is hidden (a default grace under a long timeout).
        cleanup_grace_ms: or(spec.cleanup_grace_ms, defaults.cleanup_grace_ms).max(heartbeat_timeout_ms),
        snapshot_min_interval_ms: or(spec.snapshot_min_interval_ms, defaults.snapshot_min_interval_ms),
    })
}

/// Each tier's heartbeat timeout for reads of `group`'s instances (`defaults` where a tier has no
/// usable event-report storage).
pub fn liveness(snap: &crate::registry::Snapshot, group: &str, defaults: ReportSettings) -> Liveness {
    let of = |tier| settings_for(snap, group, tier, defaults).unwrap_or(defaults).heartbeat_timeout_ms;
    Liveness { l1p5_ms: of(StorageType::ST_EVENT_REPORT_L1P5), l2_ms: of(StorageType::ST_EVENT_REPORT_L2) }
}

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings { heartbeat_timeout_ms: 30_000, cleanup_grace_ms: 300_000, snapshot_min_interval_ms: 30_000 }
    }
}

/// What a ReportEvent did.
#[derive(Debug, Clone, Default)]
pub struct ReportOutcome {
    /// One code per event, in order.
    pub codes: Vec<StatusCode>,
    /// Why each failed item failed (by index), for the header's message.
    pub reasons: Vec<Option<String>>,
    pub committed_snapshot_version: String,
    pub retry_after_ms: i64,
    pub snapshot_required: bool,
    /// Adds stored as this frontend prepared them (a batch of new blocks; see `prepare_adds`).
    pub prepared: u64,
}

/// The reporter id of a request: `L1P5|<host>` or `L2|<host>`.
pub fn reporter_id(storage_type: StorageType, host: &str) -> Result<String> {
    let tier = match storage_type {
        StorageType::ST_EVENT_REPORT_L1P5 => "L1P5",
        StorageType::ST_EVENT_REPORT_L2 => "L2",
        other => {
            return Err(Error::invalid(format!(
                "storage_type {} cannot report events; use ST_EVENT_REPORT_L1P5 or ST_EVENT_REPORT_L2",
                other.name()
            )));
        }
    };
    if host.is_empty() || host.len() > MAX_HOST_BYTES {
        return Err(Error::invalid(format!("host_ip_port must have 1..={MAX_HOST_BYTES} bytes, has {}", host.len())));
    }
    if host.contains('#') || host.chars().any(char::is_control) || host.contains(' ') {
        return Err(Error::invalid(format!(
            "host_ip_port '{}' must not contain '#', spaces or control characters",
            host.escape_debug()
        )));
    }
    Ok(format!("{tier}|{host}"))
}

/// One event as the script takes it (see `lua/report_event.lua`), or why the item fails.
enum Encoded {
    One(Vec<u8>),
    Snapshot(Vec<Vec<u8>>),
}

fn text(field: &str, value: &str, max: usize) -> std::result::Result<(), String> {
    if value.is_empty() || value.len() > max {
        return Err(format!("{field} must have 1..={max} bytes, has {}", value.len()));
    }
    // Printable ASCII (every block key, medium, name and URI an engine sends) has no control
    // character; anything else is checked character by character.
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) && value.chars().any(char::is_control) {
        return Err(format!("{field} '{}' must not contain control characters", value.escape_debug()));
    }
    Ok(())
}

/// A block key in decimal text: an int64, or a uint64 (vLLM's hashes; the same 64 bits). No
/// sign, no spaces (as Tair).
fn block_key(value: &str) -> std::result::Result<[u8; 8], String> {
    let bad = || format!("block_key '{}' is not an int64 or uint64 in decimal text", value.escape_debug());
    if value.starts_with('+') || value.trim() != value {
        return Err(bad());
    }
    value.parse::<i64>().or_else(|_| value.parse::<u64>().map(|u| u as i64)).map(block_field).map_err(|_| bad())
}

fn medium(value: &str) -> std::result::Result<(), String> {
    text("medium", value, MAX_MEDIUM_BYTES)?;
    if value.contains(',') || value.contains('#') {
        return Err(format!("medium '{value}' must not contain ',' or '#'"));
    }
    // `%seq` in the reporters hash is the counter of medium ids, not a medium.
    if value == "seq" {
        return Err("medium 'seq' is reserved; name the medium otherwise".into());
    }
    Ok(())
}

/// `key(8) tail`, the tail in the form the script stores (medium length u8 | medium | spec
/// count u8 | (name length u8 | name | uri length u16 LE | uri)*), checked: specs not empty,
/// names unique, URIs with a
/// scheme (letters, digits, `+-._`: Tair's own `event_report://` has an underscore) and without
/// `s_version` (kvcm adds the generation itself).
fn block_with_specs<S: NameUri>(
    prefix: &[u8],
    key: &str,
    med: &str,
    specs: &[S],
    names: &[&str],
) -> std::result::Result<Vec<u8>, String> {
    let key = block_key(key)?;
    medium(med)?;
    if specs.is_empty() {
        return Err("specs is empty; a reported block needs at least one spec (name and uri)".into());
    }
    if specs.len() > MAX_SPECS {
        return Err(format!("specs has {} entries; at most {MAX_SPECS} are accepted", specs.len()));
    }
    let size = specs.iter().map(|s| 3 + s.name().len() + s.uri().len()).sum::<usize>();
    let mut out = Vec::with_capacity(prefix.len() + 10 + med.len() + size);
    out.extend_from_slice(prefix);
    out.extend_from_slice(&key);
    out.push(med.len() as u8);
    out.extend_from_slice(med.as_bytes());
    out.push(specs.len() as u8);
    // Duplicate names: a few specs (the usual one per block) are checked against the earlier
    // ones, more through a set (never quadratic in MAX_SPECS).
    let mut seen = std::collections::HashSet::new();
    for (i, spec) in specs.iter().enumerate() {
        let (name, uri) = (spec.name(), spec.uri());
        text("spec name", name, MAX_SPEC_NAME_BYTES)?;
        spec_name(name, names)?;
        let twice =
            if specs.len() <= 8 { specs[..i].iter().any(|earlier| earlier.name() == name) } else { !seen.insert(name) };
        if twice {
            return Err(format!("spec '{name}' appears twice; spec names must be unique"));
        }
        text("uri", uri, MAX_URI_BYTES)?;
        let scheme_ok = uri.split_once("://").is_some_and(|(scheme, rest)| {
            !scheme.is_empty()
                && !rest.is_empty()
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-._".contains(c))
        });
        if !scheme_ok || uri.contains(' ') {
            return Err(format!("uri '{}' of spec '{name}' is not a URI (scheme://…)", uri.escape_debug()));
        }
        let query = uri.split_once('?').map_or("", |(_, q)| q);
        if query.split('&').any(|p| p == "s_version" || p.starts_with("s_version=")) {
            return Err(format!("uri of spec '{name}' carries s_version; kvcm adds it, leave it out"));
        }
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(uri.len() as u16).to_le_bytes());
        out.extend_from_slice(uri.as_bytes());
    }
    Ok(out)
}

/// A spec as the encoder reads it: borrowed from a request body (adds) or owned (snapshot
/// items).
trait NameUri {
    fn name(&self) -> &str;
    fn uri(&self) -> &str;
}

impl NameUri for LocationSpec {
    fn name(&self) -> &str {
        &self.name
    }
    fn uri(&self) -> &str {
        &self.uri
    }
}

impl NameUri for SpecRef<'_> {
    fn name(&self) -> &str {
        &self.name
    }
    fn uri(&self) -> &str {
        &self.uri
    }
}

/// A spec name of the instance (its `location_spec_infos`), as in Tair: what a reporter holds
/// is parts of the instance's blocks.
fn spec_name(name: &str, names: &[&str]) -> std::result::Result<(), String> {
    if names.contains(&name) {
        return Ok(());
    }
    Err(format!(
        "spec '{}' is not one of the instance's location_spec_infos ({})",
        name.escape_debug(),
        names.join(", ")
    ))
}

/// Checks one item and encodes it.
fn encode(item: &EventRef, limits: &Limits, names: &[&str]) -> std::result::Result<Encoded, String> {
    use ReportEventType as T;
    let set = [
        ("node_register", item.node_register.is_some(), T::EVENT_NODE_REGISTER),
        ("block_add", item.block_add.is_some(), T::EVENT_BLOCK_ADD),
        ("block_delete", item.block_delete.is_some(), T::EVENT_BLOCK_DELETE),
        ("host_down", item.host_down.is_some(), T::EVENT_HOST_DOWN),
        ("heartbeat", item.heartbeat.is_some(), T::EVENT_HEARTBEAT),
        ("block_snapshot", item.block_snapshot.is_some(), T::EVENT_BLOCK_SNAPSHOT),
    ];
    let mut present = set.iter().filter(|(_, on, _)| *on);
    match (present.next(), present.next()) {
        (Some((_, _, t)), None) if *t == item.event_type => {}
        (None, _) => {
            return Err(format!(
                "event_type {} needs its payload (an empty message is still set: e.g. \"heartbeat\": {{}})",
                item.event_type.name()
            ));
        }
        (Some((name, _, _)), None) => {
            return Err(format!("event_type {} does not match the payload {name}", item.event_type.name()));
        }
        (Some(_), Some(_)) => return Err("an event carries exactly one payload".into()),
    }
    match item.event_type {
        T::EVENT_NODE_REGISTER => {
            let mediums = &item.node_register.as_ref().expect("matched").mediums;
            limits.count("mediums", mediums.len(), 64, "at most 64 mediums").map_err(|e| e.to_string())?;
            let mut out = b"R".to_vec();
            for (i, m) in mediums.iter().enumerate() {
                medium(m)?;
                if i > 0 {
                    out.push(0);
                }
                out.extend_from_slice(m.as_bytes());
            }
            Ok(Encoded::One(out))
        }
        T::EVENT_HEARTBEAT => {
            let status = &item.heartbeat.as_ref().expect("matched").system_status;
            if status.len() > 64 {
                return Err(format!("system_status has {} entries; at most 64 are accepted", status.len()));
            }
            for (k, v) in status {
                limits.string("system_status key", k).map_err(|e| e.to_string())?;
                limits.string("system_status value", v).map_err(|e| e.to_string())?;
            }
            Ok(Encoded::One(b"H".to_vec()))
        }
        T::EVENT_HOST_DOWN => Ok(Encoded::One(b"X".to_vec())),
        T::EVENT_BLOCK_ADD => {
            let p = item.block_add.as_ref().expect("matched");
            Ok(Encoded::One(block_with_specs(b"A", &p.block_key, &p.medium, &p.specs, names)?))
        }
        T::EVENT_BLOCK_DELETE => {
            let p = item.block_delete.as_ref().expect("matched");
            let mut out = b"D".to_vec();
            out.extend(block_key(&p.block_key)?);
            medium(&p.medium)?;
            out.push(p.medium.len() as u8);
            out.extend_from_slice(p.medium.as_bytes());
            if p.spec_names.is_empty() {
                return Err("spec_names is empty; name the specs to delete".into());
            }
            if p.spec_names.len() > MAX_SPECS {
                return Err(format!("spec_names has {} entries; at most {MAX_SPECS} are accepted", p.spec_names.len()));
            }
            let mut seen = std::collections::HashSet::new();
            for (i, name) in p.spec_names.iter().enumerate() {
                text("spec name", name, MAX_SPEC_NAME_BYTES)?;
                if !seen.insert(name.as_str()) {
                    return Err(format!("spec '{name}' appears twice in spec_names"));
                }
                if i > 0 {
                    out.push(0);
                }
                out.extend_from_slice(name.as_bytes());
            }
            Ok(Encoded::One(out))
        }
        T::EVENT_BLOCK_SNAPSHOT => {
            let p = item.block_snapshot.as_ref().expect("matched");
            let mut seen = std::collections::HashSet::new();
            let mut items = Vec::with_capacity(p.blocks.len());
            for b in &p.blocks {
                let encoded = block_with_specs(b"", &b.block_key, &b.medium, &b.specs, names)?;
                if !seen.insert((encoded[..8].to_vec(), b.medium.clone())) {
                    return Err(format!(
                        "block {} medium {} appears twice in the snapshot; each appears once with all its specs",
                        b.block_key, b.medium
                    ));
                }
                items.push(encoded);
            }
            Ok(Encoded::Snapshot(items))
        }
        T::EVENT_UNSPECIFIED => Err("event_type is EVENT_UNSPECIFIED".into()),
    }
}

/// Request-level rules, checked before anything is written: at most one snapshot, never with
/// block adds or deletes; HOST_DOWN alone.
fn composition(events: &[EventRef]) -> Result<()> {
    let count = |t: ReportEventType| events.iter().filter(|e| e.event_type == t).count();
    let snapshots = count(ReportEventType::EVENT_BLOCK_SNAPSHOT);
    if snapshots > 1 {
        return Err(Error::invalid("a request carries at most one EVENT_BLOCK_SNAPSHOT"));
    }
    if snapshots == 1 && (count(ReportEventType::EVENT_BLOCK_ADD) + count(ReportEventType::EVENT_BLOCK_DELETE)) > 0 {
        return Err(Error::invalid(
            "EVENT_BLOCK_SNAPSHOT cannot share a request with EVENT_BLOCK_ADD or EVENT_BLOCK_DELETE",
        ));
    }
    if count(ReportEventType::EVENT_HOST_DOWN) > 0 && events.len() > 1 {
        return Err(Error::invalid("EVENT_HOST_DOWN must be alone in its request"));
    }
    Ok(())
}

impl DataPlane {
    /// Applies one ReportEvent request for the (registered) instance `instance_id`.
    pub async fn report_event(
        &self,
        inst: &crate::wire::InstanceInfo,
        req: &ReportEventBody<'_>,
        settings: ReportSettings,
        limits: &Limits,
    ) -> Result<ReportOutcome> {
        // No events: nothing to do and nothing to check (Tair answers every field's default).
        if req.events.is_empty() {
            return Ok(ReportOutcome::default());
        }
        let reporter = reporter_id(req.storage_type, &req.host_ip_port)?;
        limits.count("events", req.events.len(), limits.max_keys_per_request, "max_keys_per_request")?;
        let items: usize =
            req.events.iter().map(|e| e.block_snapshot.as_ref().map_or(1, |s| s.blocks.len().max(1))).sum();
        limits.count("events and snapshot blocks", items, limits.max_keys_per_request, "max_keys_per_request")?;
        composition(&req.events)?;
        let mut out = ReportOutcome {
            codes: vec![StatusCode::OK; req.events.len()],
            reasons: vec![None; req.events.len()],
            ..Default::default()
        };
        let names: Vec<&str> = inst.location_spec_infos.iter().map(|s| s.name.as_str()).collect();
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(req.events.len());
        let mut sent: Vec<usize> = Vec::with_capacity(req.events.len());
        for (i, item) in req.events.iter().enumerate() {
            match encode(item, limits, &names) {
                Ok(Encoded::One(bytes)) => {
                    args.push(bytes);
                    sent.push(i);
                }
                Ok(Encoded::Snapshot(blocks)) => {
                    args.push(format!("S{}", blocks.len()).into_bytes());
                    args.extend(blocks);
                    sent.push(i);
                }
                Err(why) => {
                    out.codes[i] = StatusCode::INVALID_ARGUMENT;
                    out.reasons[i] = Some(format!("event {i}: {why}"));
                }
            }
        }
        let keys = self.keys(&inst.instance_id);
        // Many adds of a known reporter: prepared here against its record, so that the script
        // stores new blocks as sent (see `lua/report_event.lua`, event 'B').
        let (events, sent) = match self.prepare_adds(&keys, &reporter, &args, &sent).await? {
            Some(batched) => batched,
            None => (args.iter().map(|a| Cow::Borrowed(a.as_slice())).collect(), sent),
        };
        // Even when every item failed validation, the script runs (with no events) for the
        // reporter's version and whether it needs a snapshot.
        let (grace, interval) = (settings.cleanup_grace_ms.to_string(), settings.snapshot_min_interval_ms.to_string());
        let version = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let mut argv: Vec<&[u8]> = Vec::with_capacity(4 + events.len());
        argv.extend([reporter.as_bytes(), grace.as_bytes(), interval.as_bytes(), version.as_bytes()]);
        argv.extend(events.iter().map(|e| e.as_ref()));
        let reply =
            self.run(&scripts::REPORT_EVENT, &[&keys.reporters, &keys.engine, &keys.engine_specs], &argv).await?;
        // Reads through this frontend see the instance's reporters at once.
        self.saw_reporters(&inst.instance_id);
        let mut it = reply.into_iter();
        let mut next = || it.next().ok_or_else(|| Error::internal("report_event: short reply"));
        let codes: Vec<u8> = redis::from_redis_value(next()?)?;
        out.committed_snapshot_version = redis::from_redis_value(next()?)?;
        out.retry_after_ms = redis::from_redis_value(next()?)?;
        out.snapshot_required = redis::from_redis_value::<i64>(next()?)? == 1;
        out.prepared = redis::from_redis_value(next()?)?;
        if codes.len() != sent.len() {
            return Err(Error::internal(format!("report_event: {} codes for {} events", codes.len(), sent.len())));
        }
        for (&i, &code) in sent.iter().zip(&codes) {
            let code = StatusCode::from_number(code as i64).unwrap_or(StatusCode::INTERNAL_ERROR);
            out.codes[i] = code;
            out.reasons[i] = match code {
                StatusCode::OK => None,
                StatusCode::NODE_NOT_REGISTERED => Some(format!(
                    "event {i}: reporter {reporter} is not registered (HOST_DOWN, or no heartbeat for {} ms): send EVENT_NODE_REGISTER first",
                    settings.cleanup_grace_ms
                )),
                StatusCode::SNAPSHOT_RATE_LIMITED => Some(format!(
                    "event {i}: the last snapshot of {reporter} committed less than {} ms ago; retry after {} ms",
                    settings.snapshot_min_interval_ms, out.retry_after_ms
                )),
                StatusCode::REACH_MAX_ENTITY_CAPACITY => {
                    Some(format!("event {i}: the instance has 255 media already, or the block 256 reporters' records"))
                }
                other => Some(format!("event {i}: {}", other.name())),
            };
        }
        Ok(out)
    }

    /// Drops every engine-reported block and reporter of an instance (removeInstance).
    pub async fn drop_engine_reports(&self, instance_id: &str) -> Result<()> {
        let keys = self.keys(instance_id);
        let _: () = redis::cmd("DEL")
            .arg(&keys.reporters)
            .arg(&keys.engine)
            .arg(&keys.engine_specs)
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }
}

/// A reporter as a query sees it.
#[derive(Debug, Clone)]
struct Reporter {
    host: Arc<str>,
    l2: bool,
    /// Its generation's version (32 hex; the first add starts a generation), empty before.
    version: Arc<str>,
    /// Live: active, heard from within the heartbeat timeout.
    live: bool,
    epoch: u32,
    generation: u32,
    strict: bool,
}

impl Reporter {
    fn storage_type(&self) -> StorageType {
        if self.l2 { StorageType::ST_EVENT_REPORT_L2 } else { StorageType::ST_EVENT_REPORT_L1P5 }
    }
}

/// A hash read as (field, value) pairs.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// The field of an instance's `reporters` hash set to a fresh random token whenever anything
/// but a heartbeat time changes: a reporter created, a record's state, lifecycle, generation,
/// version, strict flag or media, a medium id handed out (`lua/report_event.lua`).
const VERSION_FIELD: &str = "#ver";

/// An instance's `reporters` hash as this frontend last read it, reused by later reads while
/// the hash's version field is unchanged — then only heartbeat times can have moved, and only
/// forward — and every active reporter in it was heard from within half its tier's heartbeat
/// timeout: such a reporter is live whatever heartbeats came since, and one that is not live in
/// the copy is not live in Valkey either, so every visibility decision is the one the hash
/// itself gives. A copy holding an active reporter silent for longer (a host gone without
/// HOST_DOWN, until the worker forgets it) is not reused.
pub struct CachedReporters {
    version: Vec<u8>,
    /// The reporters by index, as stored: each (not yet `live`), whether active, its heartbeat.
    by_index: std::collections::HashMap<u32, (Reporter, bool, f64)>,
    /// Medium ids by name (`%<medium>`).
    media: std::collections::HashMap<Vec<u8>, u8>,
    /// The oldest heartbeat (Valkey ms) of an active reporter of each tier (L1P5, L2).
    oldest: [Option<f64>; 2],
    /// Valkey's time when read, and this process's clock then.
    read_at_ms: f64,
    read_at: std::time::Instant,
}

impl CachedReporters {
    /// The instance's `reporters` hash (`HGETALL`), decoded, as read at Valkey time `now_ms`.
    fn new(all: Fields, now_ms: f64) -> Self {
        let records: std::collections::HashMap<&[u8], &[u8]> =
            all.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
        let mut oldest: [Option<f64>; 2] = [None, None];
        let (mut version, mut by_index, mut media) =
            (Vec::new(), std::collections::HashMap::new(), std::collections::HashMap::new());
        for (field, value) in &all {
            if field.as_slice() == VERSION_FIELD.as_bytes() {
                version = value.clone();
            } else if let Some(idx) =
                field.strip_prefix(b"#").and_then(|i| std::str::from_utf8(i).ok()?.parse::<u32>().ok())
            {
                // '#<idx>' -> reporter id -> its record.
                let Some((r, active, hb)) = records.get(value.as_slice()).and_then(|raw| reporter(value, raw)) else {
                    continue;
                };
                if active {
                    let tier = usize::from(r.l2);
                    oldest[tier] = Some(oldest[tier].map_or(hb, |o| o.min(hb)));
                }
                by_index.insert(idx, (r, active, hb));
            } else if let Some(name) = field.strip_prefix(b"%").filter(|n| *n != b"seq")
                && let Some(id) = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u8>().ok())
            {
                media.insert(name.to_vec(), id);
            }
        }
        CachedReporters { version, by_index, media, oldest, read_at_ms: now_ms, read_at: std::time::Instant::now() }
    }

    /// The reporters by index as of Valkey time `now_ms`: live when active and heard from within
    /// their tier's timeout.
    fn reporters_at(&self, now_ms: f64, liveness: Liveness) -> std::collections::HashMap<u32, Reporter> {
        self.by_index
            .iter()
            .map(|(idx, (r, active, hb))| {
                let timeout_ms = if r.l2 { liveness.l2_ms } else { liveness.l1p5_ms };
                (*idx, Reporter { live: *active && now_ms - hb <= timeout_ms as f64, ..r.clone() })
            })
            .collect()
    }

    /// Valkey's time now, as this process's clock tells since the read.
    fn valkey_now_estimate(&self) -> f64 {
        self.read_at_ms + self.read_at.elapsed().as_secs_f64() * 1000.0
    }

    /// Whether every active reporter of the copy is, at `now_ms`, within half its timeout.
    fn usable_at(&self, now_ms: f64, liveness: Liveness) -> bool {
        let fresh =
            |oldest: Option<f64>, timeout_ms: u64| oldest.is_none_or(|hb| now_ms - hb <= timeout_ms as f64 / 2.0);
        fresh(self.oldest[0], liveness.l1p5_ms) && fresh(self.oldest[1], liveness.l2_ms)
    }
}

/// The longest a frontend reuses its copy of an instance's reporters, whatever else says it
/// may: a bound on how long any change the version field does not mark (a frontend of a version
/// before it writing during a rolling upgrade, heartbeat times set back by a failover that lost
/// writes) can go unseen.
const COPY_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// How presence reads got the instance's reporters: from [`CachedReporters`], or read from
/// Valkey (`kvcm_engine_reporter_reads_total{source}`).
#[derive(Debug, Default)]
pub struct ReporterReads {
    pub cached: std::sync::atomic::AtomicU64,
    pub read: std::sync::atomic::AtomicU64,
}

/// Which live reporters hold each block of a read ([`DataPlane::engine_holders`]).
pub(crate) struct EngineHolders {
    reporters: std::collections::HashMap<u32, Reporter>,
    /// Per block, in request order: (reporter index, medium id) of each visible record.
    pub(crate) per_block: Vec<Vec<(u32, u8)>>,
}

impl EngineHolders {
    /// Whether reporter `idx` is of the L2 tier, and its host.
    pub(crate) fn tier_and_host(&self, idx: u32) -> Option<(bool, &str)> {
        self.reporters.get(&idx).map(|r| (r.l2, &*r.host))
    }
}

/// Decodes a reporter record (`lua/report_event.lua`): the reporter (not yet `live`), whether
/// it is active (state 'A') and its last heartbeat (ms); `None` if malformed.
fn reporter(id: &[u8], raw: &[u8]) -> Option<(Reporter, bool, f64)> {
    let id = std::str::from_utf8(id).ok()?;
    let (tier, host) = id.split_once('|')?;
    // state c1 | idx u32 | epoch u32 | heartbeat f64 | snapshot f64 | generation u32 | strict c1
    let state = *raw.first()?;
    let epoch = u32::from_le_bytes(raw.get(5..9)?.try_into().ok()?);
    let hb = f64::from_le_bytes(raw.get(9..17)?.try_into().ok()?);
    let generation = u32::from_le_bytes(raw.get(25..29)?.try_into().ok()?);
    let strict = *raw.get(29)? == b'1';
    let tail = raw.get(30..).unwrap_or_default();
    let version = tail.split(|b| *b == 0).next().and_then(|v| std::str::from_utf8(v).ok()).unwrap_or_default();
    let r = Reporter {
        host: host.into(),
        l2: tier == "L2",
        version: version.into(),
        live: false,
        epoch,
        generation,
        strict,
    };
    Some((r, state == b'A', hb))
}

/// Calls `f(idx)` for each record of a block's presence (`engine` value: 13-byte records of
/// reporter index, epoch, generation, medium id) that is visible and in one of `mediums` (all
/// when `None`).
fn visible_records(
    raw: &[u8],
    reporters: &std::collections::HashMap<u32, Reporter>,
    mediums: Option<&std::collections::HashSet<u8>>,
    mut f: impl FnMut(u32),
) {
    for r in raw.chunks_exact(13) {
        let idx = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
        let epoch = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
        let generation = u32::from_le_bytes([r[8], r[9], r[10], r[11]]);
        let Some(rep) = reporters.get(&idx) else { continue };
        let current = rep.live && rep.epoch == epoch && (!rep.strict || rep.generation == generation);
        if current && mediums.is_none_or(|m| m.contains(&r[12])) {
            f(idx);
        }
    }
}

/// `uri` with `s_version=<version>` in its query (before any `#fragment`), as Tair answers
/// engine-reported URIs; unchanged while the reporter has no generation.
fn with_s_version(uri: String, version: &str) -> String {
    if version.is_empty() {
        return uri;
    }
    let (base, fragment) = match uri.split_once('#') {
        Some((b, f)) => (b.to_string(), format!("#{f}")),
        None => (uri, String::new()),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}s_version={version}{fragment}")
}

/// Decodes a specs value (`count u8 | (name length u8 | name | uri length u16 LE | uri)*`).
fn decode_specs(raw: &[u8]) -> Option<Vec<(String, String)>> {
    let (&n, mut rest) = raw.split_first()?;
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (&nl, r) = rest.split_first()?;
        let name = std::str::from_utf8(r.get(..nl as usize)?).ok()?.to_string();
        let r = &r[nl as usize..];
        let ul = u16::from_le_bytes(r.get(..2)?.try_into().ok()?) as usize;
        let uri = std::str::from_utf8(r.get(2..2 + ul)?).ok()?.to_string();
        rest = &r[2 + ul..];
        out.push((name, uri));
    }
    Some(out)
}

impl DataPlane {
    /// A read of the reported tiers: the instance's reporters, Valkey's time (ms) and the
    /// `engine` presence value of each of `blocks`, decoded where the reply put them. One
    /// pipeline; a long list goes as concurrent chunks on the same connection, as block
    /// records are read ([`Self::field_values`]). The reporters come from this frontend's
    /// [`CachedReporters`] when the copy is under [`COPY_MAX_AGE`] old, the hash's version field
    /// says nothing but heartbeats changed since, and no live reporter's heartbeat can have
    /// expired in it (then the pipeline asks for the version instead of the whole hash);
    /// otherwise — and, when the version changed, in a read of its own — from Valkey.
    async fn read_presence(
        &self,
        instance_id: &str,
        blocks: &[i64],
        liveness: Liveness,
    ) -> Result<(Arc<CachedReporters>, f64, super::Records)> {
        use std::sync::atomic::Ordering::Relaxed;
        let keys = self.keys(instance_id);
        let cached = self.reporters_cache.lock().unwrap_or_else(|e| e.into_inner()).get(instance_id).cloned();
        if let Some(c) =
            cached.filter(|c| c.read_at.elapsed() < COPY_MAX_AGE && c.usable_at(c.valkey_now_estimate(), liveness))
        {
            let (head, now, entries) = self.presence_pipeline(&keys, blocks, false).await?;
            let version: Option<Vec<u8>> = redis::from_redis_value(head)?;
            if version.unwrap_or_default() == c.version && c.usable_at(now, liveness) {
                self.reporter_reads.cached.fetch_add(1, Relaxed);
                return Ok((c, now, entries));
            }
            // Changed meanwhile: read again, the reporters first as always.
        }
        let (head, now, entries) = self.presence_pipeline(&keys, blocks, true).await?;
        let all: Fields = redis::from_redis_value(head)?;
        self.reporter_reads.read.fetch_add(1, Relaxed);
        Ok((self.cache_reporters(instance_id, all, now), now, entries))
    }

    /// The pipeline of [`Self::read_presence`]: the `reporters` hash (`whole`) or its version
    /// field, Valkey's time (ms), and the blocks' presence values.
    async fn presence_pipeline(
        &self,
        keys: &crate::keys::InstanceKeys,
        blocks: &[i64],
        whole: bool,
    ) -> Result<(redis::Value, f64, super::Records)> {
        let mut pipe = redis::pipe();
        if whole {
            pipe.cmd("HGETALL").arg(&keys.reporters);
        } else {
            pipe.cmd("HGET").arg(&keys.reporters).arg(VERSION_FIELD);
        }
        pipe.cmd("TIME");
        let ms = |(s, us): (u64, u64)| s as f64 * 1000.0 + (us / 1000) as f64;
        if blocks.len() <= 2 * super::HMGET_CHUNK {
            let hmget = pipe.cmd("HMGET").arg(&keys.engine);
            for b in blocks {
                hmget.arg(&block_field(*b)[..]);
            }
            let (head, time, entries): (redis::Value, (u64, u64), redis::Value) =
                pipe.query_async(&mut self.conn()).await?;
            return Ok((head, ms(time), super::Records::from_replies(vec![entries], blocks.len())?));
        }
        let mut conn = self.conn();
        let first = pipe.query_async::<(redis::Value, (u64, u64))>(&mut conn);
        let ((head, time), entries) = futures::future::try_join(
            async { first.await.map_err(Error::from) },
            self.field_values(&keys.engine, blocks),
        )
        .await?;
        Ok((head, ms(time), entries))
    }

    /// Keeps `all`, the instance's `reporters` hash as read at Valkey time `now_ms`, for later
    /// reads ([`CachedReporters`]).
    fn cache_reporters(&self, instance_id: &str, all: Fields, now_ms: f64) -> Arc<CachedReporters> {
        let cached = Arc::new(CachedReporters::new(all, now_ms));
        let mut cache = self.reporters_cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= super::KEYS_CACHED {
            cache.clear();
        }
        cache.insert(instance_id.to_string(), cached.clone());
        cached
    }

    /// Who holds each of `blocks` among the instance's live reporters (current lifecycle and
    /// generation): `None` when it has no reporters. One round trip's wait, two when the
    /// reporters changed meanwhile ([`Self::read_presence`]).
    pub(crate) async fn engine_holders(
        &self,
        instance_id: &str,
        blocks: &[i64],
        liveness: Liveness,
    ) -> Result<Option<EngineHolders>> {
        if blocks.is_empty() {
            return Ok(None);
        }
        let (cached, now_ms, entries) = self.read_presence(instance_id, blocks, liveness).await?;
        if cached.by_index.is_empty() {
            return Ok(None);
        }
        let reporters = cached.reporters_at(now_ms, liveness);
        let per_block = entries
            .iter()
            .map(|raw| {
                let mut held = Vec::new();
                for r in raw.unwrap_or_default().chunks_exact(13) {
                    visible_records(r, &reporters, None, |idx| held.push((idx, r[12])));
                }
                held
            })
            .collect();
        Ok(Some(EngineHolders { reporters, per_block }))
    }

    /// The locations of chosen holders: `(block, reporter index, medium id)` each, with the
    /// reporter's specs (only those named in `spec_filter` when it is not empty) and, after a
    /// generation started, `s_version=<its committed version>` on each URI (Tair's visibility
    /// token). One HMGET of the specs.
    pub(crate) async fn engine_location_of(
        &self,
        instance_id: &str,
        holders: &EngineHolders,
        picks: &[(i64, u32, u8)],
        spec_filter: &[String],
    ) -> Result<Vec<Option<crate::wire::CacheLocation>>> {
        if picks.is_empty() {
            return Ok(Vec::new());
        }
        let mut hmget = redis::cmd("HMGET");
        hmget.arg(&self.keys(instance_id).engine_specs);
        for (block, idx, mid) in picks {
            let mut field = block_field(*block).to_vec();
            field.extend_from_slice(&idx.to_le_bytes());
            field.push(*mid);
            hmget.arg(field);
        }
        let specs: Vec<Option<Vec<u8>>> = hmget.query_async(&mut self.conn()).await?;
        Ok(picks
            .iter()
            .zip(specs)
            .map(|((_, idx, _), raw)| {
                let rep = holders.reporters.get(idx)?;
                let location_specs: Vec<LocationSpec> = decode_specs(&raw?)?
                    .into_iter()
                    .filter(|(name, _)| spec_filter.is_empty() || spec_filter.contains(name))
                    .map(|(name, uri)| LocationSpec { name, uri: with_s_version(uri, &rep.version) })
                    .collect();
                // A filter that keeps none of its specs still answers the block (as kvcm's own
                // locations do): the engine holds it.
                Some(crate::wire::CacheLocation {
                    storage_type: rep.storage_type(),
                    spec_size: location_specs.len() as i32,
                    location_specs,
                })
            })
            .collect())
    }

    /// Engine-reported locations of `blocks` (getCacheLocation's view of the reported tiers):
    /// for each block a live reporter holds, one location — an `ST_EVENT_REPORT_L2` holder first
    /// (peers can fetch from it), then the smaller host ([`Self::engine_location_of`]).
    pub async fn engine_locations(
        &self,
        instance_id: &str,
        blocks: &[i64],
        spec_filter: &[String],
        liveness: Liveness,
    ) -> Result<Vec<Option<crate::wire::CacheLocation>>> {
        let mut out = vec![None; blocks.len()];
        let Some(holders) = self.engine_holders(instance_id, blocks, liveness).await? else { return Ok(out) };
        let rank = |idx: &u32| holders.reporters.get(idx).map(|r| (!r.l2, r.host.clone()));
        let mut at = Vec::new();
        let mut picks = Vec::new();
        for (i, held) in holders.per_block.iter().enumerate() {
            if let Some((idx, mid)) = held.iter().min_by_key(|(idx, _)| rank(idx)) {
                at.push(i);
                picks.push((blocks[i], *idx, *mid));
            }
        }
        for (i, loc) in at.into_iter().zip(self.engine_location_of(instance_id, &holders, &picks, spec_filter).await?) {
            out[i] = loc;
        }
        Ok(out)
    }

    /// GetHostCacheState: for the prompt `blocks`, each live host holding at least its first
    /// block, with its own leading blocks (`local`, L1P5 and L2 tiers alike) and what one peer's
    /// L2 tier would add (`p2p_1_*`: the peer giving the longest prefix, ties to the smaller
    /// host). One round trip's wait, two when the reporters changed meanwhile
    /// ([`Self::read_presence`]).
    pub async fn host_cache_state(
        &self,
        instance_id: &str,
        blocks: &[i64],
        mediums: &[String],
        liveness: Liveness,
    ) -> Result<Vec<crate::wire::meta::HostCacheMatch>> {
        use std::collections::{BTreeMap, HashMap};
        if blocks.is_empty() {
            return Ok(Vec::new());
        }
        let (cached, now_ms, entries) = self.read_presence(instance_id, blocks, liveness).await?;
        // The requested media by id (a medium nobody reported matches nothing).
        let wanted: Option<std::collections::HashSet<u8>> = (!mediums.is_empty())
            .then(|| mediums.iter().filter_map(|m| cached.media.get(m.as_bytes()).copied()).collect());
        let reporters = cached.reporters_at(now_ms, liveness);
        // Per host, per block up to the first block nobody holds: bit 0 held (any tier), bit 1
        // held in L2. One byte per host and block, only for hosts holding something.
        const OWN: u8 = 1;
        const L2: u8 = 2;
        // The hot loop reads every record of every block (hosts × blocks): live reporters by
        // index in a table (indexes are small and dense), each with its host's slot, and the
        // wanted media in a 256-entry mask — no hashing per record.
        let mut slots: BTreeMap<&str, usize> = BTreeMap::new();
        struct Live {
            slot: usize,
            bits: u8,
            epoch: u32,
            generation: u32,
            strict: bool,
        }
        let mut by_idx: HashMap<u32, Live> = HashMap::new();
        for (idx, r) in &reporters {
            if r.live {
                let n = slots.len();
                let slot = *slots.entry(&*r.host).or_insert(n);
                let bits = if r.l2 { OWN | L2 } else { OWN };
                by_idx.insert(*idx, Live { slot, bits, epoch: r.epoch, generation: r.generation, strict: r.strict });
            }
        }
        let dense = by_idx.keys().max().is_some_and(|m| *m < 1 << 20);
        let mut table: Vec<Option<&Live>> = Vec::new();
        if dense {
            table.resize(by_idx.keys().max().map_or(0, |m| *m as usize + 1), None);
            for (idx, l) in &by_idx {
                table[*idx as usize] = Some(l);
            }
        }
        let lookup = |idx: u32| if dense { table.get(idx as usize).copied().flatten() } else { by_idx.get(&idx) };
        let mut medium_ok = [wanted.is_none(); 256];
        for m in wanted.iter().flatten() {
            medium_ok[*m as usize] = true;
        }
        let mut flags: Vec<Vec<u8>> = vec![Vec::new(); slots.len()];
        let mut reach = 0;
        let count = blocks.len();
        for (i, raw) in entries.iter().enumerate() {
            let mut any = false;
            for r in raw.unwrap_or_default().chunks_exact(13) {
                let Some(l) = lookup(u32::from_le_bytes([r[0], r[1], r[2], r[3]])) else { continue };
                let epoch = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
                let generation = u32::from_le_bytes([r[8], r[9], r[10], r[11]]);
                if epoch != l.epoch || (l.strict && generation != l.generation) || !medium_ok[r[12] as usize] {
                    continue;
                }
                let f = &mut flags[l.slot];
                if f.is_empty() {
                    f.resize(count, 0);
                }
                f[i] |= l.bits;
                any = true;
            }
            if !any {
                break;
            }
            reach = i + 1;
        }
        // Hosts in name order, with what they hold.
        let held: Vec<(&str, &Vec<u8>)> =
            slots.iter().map(|(host, slot)| (*host, &flags[*slot])).filter(|(_, f)| !f.is_empty()).collect();
        let at = |flags: &Vec<u8>, i: usize| flags.get(i).copied().unwrap_or(0);
        let mut out = Vec::new();
        for (host, own) in &held {
            let local = (0..reach).take_while(|&i| at(own, i) & OWN != 0).count();
            if local == 0 {
                continue;
            }
            // One peer's L2 tier filling the host's gaps: the longest prefix wins (ties to the
            // smaller host, the first met). Only a peer holding the first missing block in L2
            // can extend anything.
            let (mut total, mut fetch) = (local, 0);
            for (peer, theirs) in &held {
                if peer == host || at(theirs, local) & L2 == 0 {
                    continue;
                }
                let end = (local..reach).find(|&i| at(own, i) & OWN == 0 && at(theirs, i) & L2 == 0).unwrap_or(reach);
                if end > total {
                    total = end;
                    // Distinct keys (a prompt may repeat one).
                    fetch = (local..end)
                        .filter(|&i| at(own, i) & OWN == 0)
                        .map(|i| blocks[i])
                        .collect::<std::collections::HashSet<_>>()
                        .len();
                }
            }
            out.push(crate::wire::meta::HostCacheMatch {
                host_ip_port: host.to_string(),
                local: local as i64,
                p2p_1_fetch: fetch as i64,
                p2p_1_total_match: total as i64,
            });
        }
        Ok(out)
    }
}

/// What one [`DataPlane::prune_engine_reports`] pass did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pruned {
    pub blocks_scanned: u64,
    pub entries_dropped: u64,
    pub blocks_emptied: u64,
    /// Where the next pass starts (0: the scan of the instance's blocks is complete).
    pub cursor: u64,
}

impl DataPlane {
    /// One step of the worker's collection of engine-reported entries that can never be visible
    /// again (`lua/prune_engine.lua`): the next ~`count` blocks of the instance from `cursor`
    /// (an HSCAN cursor; 0 starts over), each checked and rewritten atomically.
    pub async fn prune_engine_reports(
        &self,
        instance_id: &str,
        cleanup_grace_ms: u64,
        cursor: u64,
        count: usize,
    ) -> Result<Pruned> {
        let keys = self.keys(instance_id);
        type Fields = Vec<(Vec<u8>, Vec<u8>)>;
        let (next, fields): (u64, Fields) = redis::cmd("HSCAN")
            .arg(&keys.engine)
            .arg(cursor)
            .arg("COUNT")
            .arg(count.max(1))
            .query_async(&mut self.conn())
            .await?;
        let mut out = Pruned { blocks_scanned: fields.len() as u64, cursor: next, ..Default::default() };
        if fields.is_empty() {
            return Ok(out);
        }
        let grace = cleanup_grace_ms.to_string();
        let mut args: Vec<&[u8]> = vec![grace.as_bytes()];
        args.extend(fields.iter().map(|(k, _)| k.as_slice()));
        let reply =
            self.run(&scripts::PRUNE_ENGINE, &[&keys.reporters, &keys.engine, &keys.engine_specs], &args).await?;
        let mut it = reply.into_iter().map(redis::from_redis_value::<u64>);
        out.entries_dropped = it.next().transpose()?.unwrap_or(0);
        out.blocks_emptied = it.next().transpose()?.unwrap_or(0);
        Ok(out)
    }
}

impl DataPlane {
    /// Forgets the instance's reporters unregistered for longer than the cleanup grace
    /// (`lua/reap_reporters.lua`); the worker runs it after each complete collection pass.
    /// Returns how many were forgotten.
    pub async fn reap_reporters(&self, instance_id: &str, cleanup_grace_ms: u64) -> Result<u64> {
        let keys = self.keys(instance_id);
        let grace = cleanup_grace_ms.to_string();
        let reply = self.run(&scripts::REAP_REPORTERS, &[&keys.reporters], &[grace.as_bytes()]).await?;
        super::first::<u64>(reply)
    }
}

/// Requests with fewer adds than this go as single events (preparing costs a round trip).
const PREPARE_AT: usize = 64;

impl DataPlane {
    /// For a request of only adds and heartbeats (at least [`PREPARE_AT`] adds of distinct
    /// blocks) of a reporter that exists, is registered and has a generation, with every
    /// medium known: the same events with the adds as one 'B' batch — heartbeats first, then
    /// the batch's header (the reporter's record and medium ids as read now), then its keys,
    /// ids and specs packed in three arguments — and the event indexes in the order the script
    /// answers them. `None` when the request does not qualify. The script takes the single-add
    /// path itself for every block when the record changed meanwhile, and for each block
    /// holding this reporter's current record in that medium with other specs, or at 256
    /// records without one (docs/events.md lists the paths).
    async fn prepare_adds<'a>(
        &self,
        keys: &crate::keys::InstanceKeys,
        reporter: &str,
        args: &'a [Vec<u8>],
        sent: &[usize],
    ) -> Result<Option<(Vec<Cow<'a, [u8]>>, Vec<usize>)>> {
        let adds = args.iter().filter(|a| a.first() == Some(&b'A')).count();
        if adds < PREPARE_AT || args.iter().any(|a| !matches!(a.first(), Some(b'A' | b'H'))) {
            return Ok(None);
        }
        // (key, medium) of each add, distinct.
        fn split(a: &[u8]) -> (&[u8], &[u8], &[u8]) {
            let mlen = a[9] as usize;
            (&a[1..9], &a[10..10 + mlen], &a[10 + mlen..])
        }
        let mut seen = std::collections::HashSet::new();
        let mut media: Vec<&[u8]> = Vec::new();
        for a in args.iter().filter(|a| a[0] == b'A') {
            let (key, medium, _) = split(a);
            // Distinct blocks: two media of one block are two records of one field.
            if !seen.insert(key) {
                return Ok(None);
            }
            if !media.contains(&medium) {
                media.push(medium);
                // A reporter holds at most 64 media (the script refuses more): past that the
                // adds go one by one and fail there, and this scan stays short.
                if media.len() > 64 {
                    return Ok(None);
                }
            }
        }
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(&keys.reporters).arg(reporter);
        let hmget = pipe.cmd("HMGET").arg(&keys.reporters);
        for m in &media {
            hmget.arg([b"%".as_slice(), m].concat());
        }
        let (record, ids): (Option<Vec<u8>>, Vec<Option<String>>) = pipe.query_async(&mut self.conn()).await?;
        let Some(record) = record.filter(|r| r.len() >= 30 && r[0] == b'A') else { return Ok(None) };
        let generation = u32::from_le_bytes(record[25..29].try_into().expect("4 bytes"));
        let Some(ids) = ids.iter().map(|i| i.as_deref()?.parse::<u8>().ok()).collect::<Option<Vec<u8>>>() else {
            return Ok(None);
        };
        if generation == 0 {
            return Ok(None);
        }
        // idx u32 | epoch u32 | generation u32 (the record: state | idx | epoch | heartbeat |
        // snapshot | generation | …)
        let header = [&record[1..9], &record[25..29]].concat();
        let mut out: Vec<Cow<'a, [u8]>> = Vec::with_capacity(args.len() - adds + 4);
        let mut order = Vec::with_capacity(sent.len());
        for (a, &i) in args.iter().zip(sent) {
            if a[0] == b'H' {
                out.push(Cow::Borrowed(a));
                order.push(i);
            }
        }
        let mut b = vec![b'B'];
        b.extend_from_slice(&header);
        b.extend_from_slice(adds.to_string().as_bytes());
        // The media by the ids the batch carries, for the script to check (names are at most
        // MAX_MEDIUM_BYTES, checked by `medium`).
        b.push(b':');
        for (m, id) in media.iter().zip(&ids) {
            b.push(*id);
            b.push(m.len() as u8);
            b.extend_from_slice(m);
        }
        out.push(Cow::Owned(b));
        // The batch in three arguments: its keys, its medium ids (a byte per block) and its
        // specs (each after its length u32 LE). Valkey parses three arguments where it parsed
        // two per block (11 ms of its time for 20,000 blocks); the script unpacks them with one
        // call per 500 blocks, and builds each presence record and specs field from the header
        // and the id.
        let specs_len: usize = args.iter().filter(|a| a[0] == b'A').map(|a| 4 + a.len() - 10 - a[9] as usize).sum();
        let mut bkeys = Vec::with_capacity(8 * adds);
        let mut mids = Vec::with_capacity(adds);
        let mut specs = Vec::with_capacity(specs_len);
        for (a, &i) in args.iter().zip(sent) {
            if a[0] != b'A' {
                continue;
            }
            let (key, medium, blob) = split(a);
            let m = media.iter().position(|m| *m == medium).expect("collected above");
            bkeys.extend_from_slice(key);
            mids.push(ids[m]);
            let len = u32::try_from(blob.len()).map_err(|_| Error::internal("report_event: specs over 4 GiB"))?;
            specs.extend_from_slice(&len.to_le_bytes());
            specs.extend_from_slice(blob);
            order.push(i);
        }
        out.extend([Cow::Owned(bkeys), Cow::Owned(mids), Cow::Owned(specs)]);
        Ok(Some((out, order)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_fields_refuse_control_characters_and_take_any_other() {
        for ok in ["gpu", "x://h/1?size=4096", "~ !", "tp\u{e9}", "\u{a0}", "\u{10ffff}"] {
            assert_eq!(text("f", ok, 64), Ok(()), "{ok:?}");
        }
        for bad in ["\0", "a\u{1f}", "\u{7f}", "\u{80}", "x\u{85}y", "\u{9f}", "\t", ""] {
            assert!(text("f", bad, 64).is_err(), "{bad:?}");
        }
        assert!(text("f", &"a".repeat(65), 64).is_err());
    }
}
