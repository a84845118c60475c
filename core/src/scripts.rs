//! The script registry: every Lua file in `lua/`, compiled into the binary (data-plane scripts
//! after the functions of `lua/lib/record.lua` they call, credential scripts after
//! `lua/lib/accounts.lua`'s), and the one function that turns a script's `{code, payload}` reply
//! into a typed result.
//!
//! Scripts are loaded on every primary at start ([`load_all`]); calls use EVALSHA and fall back
//! to loading the script when a node answers NOSCRIPT (after a restart or failover).

use crate::error::{Error, Result};
use crate::wire::StatusCode;
use redis::Script;
use std::sync::OnceLock;

/// One Lua file: its name, its source and the compiled [`Script`] (SHA1 computed once).
#[derive(Debug)]
pub struct LuaScript {
    pub file: &'static str,
    /// The file as written (its documented header first).
    pub file_source: &'static str,
    /// The library it runs after (`lua/lib/record.lua` for data-plane scripts,
    /// `lua/lib/accounts.lua` for credential scripts; empty for none).
    lib: &'static str,
    source: OnceLock<String>,
    script: OnceLock<Script>,
}

impl LuaScript {
    const fn new(file: &'static str, file_source: &'static str, lib: &'static str) -> Self {
        LuaScript { file, file_source, lib, source: OnceLock::new(), script: OnceLock::new() }
    }

    /// What Valkey runs: the library's functions the file calls ([`with_lib`]), then the file.
    pub fn source(&self) -> &str {
        self.source.get_or_init(|| with_lib(self.lib, self.file_source))
    }

    /// The script, ready for `.key(..).arg(..).invoke_async(..)` (EVALSHA, NOSCRIPT fallback).
    pub fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::new(self.source()))
    }
}

/// `lib` followed by `body`, without the library functions `body` never calls (directly or
/// through a function it keeps). Valkey scripts cannot import, so each script carries its
/// library; and every `local function` of a script is a closure Valkey builds on every call:
/// the write path's scripts paid for some twenty they never called (docs/benchmarks.md, "Writes:
/// less Lua per session"). Everything else in `lib` — comments, constants — stays, in order.
///
/// A function starts at a line `local function NAME(` at the start of a line (with the comment
/// lines right above it) and ends on that line when it ends with ` end`, else at the next line
/// that is exactly `end`; a library that strays from that shape (a top-level line inside a
/// function, a closing `end` with more on its line) is refused, so a misread can never drop
/// code silently. A name counts as called when it appears as a whole identifier in the script,
/// in a kept function or in the library's code outside functions; a mention in a comment keeps
/// a function too (never the other way round).
fn with_lib(lib: &str, body: &str) -> String {
    let lines: Vec<&str> = lib.lines().collect();
    // (function name or None for text kept as is, its lines)
    let mut items: Vec<(Option<&str>, std::ops::Range<usize>)> = Vec::new();
    let (mut i, mut plain) = (0, 0);
    while i < lines.len() {
        let Some(rest) = lines[i].strip_prefix("local function ") else {
            i += 1;
            continue;
        };
        let name = rest.split('(').next().unwrap_or(rest).trim();
        let mut start = i;
        while start > plain && lines[start - 1].starts_with("--") {
            start -= 1;
        }
        if plain < start {
            items.push((None, plain..start));
        }
        let mut end = i;
        if !lines[i].trim_end().ends_with(" end") {
            end += 1;
            while end < lines.len() && lines[end] != "end" {
                let l = lines[end];
                assert!(
                    !(l.starts_with("local ") || l.starts_with("end") || l.starts_with("--")),
                    "lua lib: `{l}` inside function {name}: a function's body is indented and it closes with a line `end`"
                );
                end += 1;
            }
            assert!(end < lines.len(), "lua lib: function {name} has no closing `end` line");
        }
        items.push((Some(name), start..end + 1));
        i = end + 1;
        plain = i;
    }
    if plain < lines.len() {
        items.push((None, plain..lines.len()));
    }
    let idents = |text: &str| -> std::collections::HashSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect()
    };
    let text_of = |r: &std::ops::Range<usize>| lines[r.clone()].join("\n");
    let mut called = idents(body);
    for (name, range) in &items {
        if name.is_none() {
            let code: Vec<&str> =
                lines[range.clone()].iter().copied().filter(|l| !l.trim_start().starts_with("--")).collect();
            called.extend(idents(&code.join("\n")));
        }
    }
    let mut keep = vec![false; items.len()];
    loop {
        let mut grew = false;
        for (k, (name, range)) in items.iter().enumerate() {
            if let Some(name) = name
                && !keep[k]
                && called.contains(*name)
            {
                keep[k] = true;
                called.extend(idents(&text_of(range)));
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let mut out = String::with_capacity(lib.len() + body.len());
    for (k, (name, range)) in items.iter().enumerate() {
        if name.is_none() || keep[k] {
            for line in &lines[range.clone()] {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out.push_str(body);
    out
}

macro_rules! scripts {
    (registry: $($name:ident => $file:literal),+ ;
     credentials: $($cname:ident => $cfile:literal),+ ;
     data: $($dname:ident => $dfile:literal),+ $(,)?) => {
        $(
            #[doc = concat!("`lua/", $file, "`")]
            pub static $name: LuaScript = LuaScript::new($file, include_str!(concat!("../../lua/", $file)), "");
        )+
        $(
            #[doc = concat!("`lua/", $cfile, "` (after `lua/lib/accounts.lua`)")]
            pub static $cname: LuaScript = LuaScript::new(
                $cfile,
                include_str!(concat!("../../lua/", $cfile)),
                include_str!("../../lua/lib/accounts.lua"),
            );
        )+
        $(
            #[doc = concat!("`lua/", $dfile, "` (after `lua/lib/record.lua`)")]
            pub static $dname: LuaScript = LuaScript::new(
                $dfile,
                include_str!(concat!("../../lua/", $dfile)),
                include_str!("../../lua/lib/record.lua"),
            );
        )+
        /// Every script, for loading at start and for tests.
        pub static ALL: &[&LuaScript] = &[$(&$name),+, $(&$cname),+, $(&$dname),+];
    };
}

scripts! {
    registry:
    REGISTRY_SNAPSHOT => "registry_snapshot.lua",
    REGISTRY_ADD_STORAGE => "registry_add_storage.lua",
    REGISTRY_UPDATE_STORAGE => "registry_update_storage.lua",
    REGISTRY_SET_STORAGE_AVAILABLE => "registry_set_storage_available.lua",
    REGISTRY_SET_STORAGE_HEALTH => "registry_set_storage_health.lua",
    REGISTRY_REMOVE_STORAGE => "registry_remove_storage.lua",
    REGISTRY_CREATE_GROUP => "registry_create_group.lua",
    REGISTRY_UPDATE_GROUP => "registry_update_group.lua",
    REGISTRY_REMOVE_GROUP => "registry_remove_group.lua",
    REGISTRY_REGISTER_INSTANCE => "registry_register_instance.lua",
    REGISTRY_REMOVE_INSTANCE => "registry_remove_instance.lua",
    REGISTRY_ADD_API_KEY => "registry_add_api_key.lua",
    AUTH_FAILURE => "auth_failure.lua",
    LEASE_ACQUIRE => "lease_acquire.lua",
    LEASE_RELEASE => "lease_release.lua";
    credentials:
    REGISTRY_ADD_ACCOUNT => "registry_add_account.lua",
    REGISTRY_DELETE_ACCOUNT => "registry_delete_account.lua",
    REGISTRY_REVOKE_API_KEY => "registry_revoke_api_key.lua";
    data:
    START_WRITE_CACHE => "start_write_cache.lua",
    FINISH_WRITE_CACHE => "finish_write_cache.lua",
    REMOVE_CACHE => "remove_cache.lua",
    TRIM_ALL_CACHE => "trim_all_cache.lua",
    TRIM_ALL_META => "trim_all_meta.lua",
    RELEASE_BLOCK => "release_block.lua",
    CLAIM_DELETE => "claim_delete.lua",
    DEAD_LETTER => "dead_letter.lua",
    REDRIVE_DEAD_LETTERS => "redrive_dead_letters.lua",
    EXPAND_TRASH => "expand_trash.lua",
    EVICT => "evict.lua",
    REPORT_EVENT => "report_event.lua",
    PRUNE_ENGINE => "prune_engine.lua",
    PRUNE_TOUCH => "prune_touch.lua",
    DROP_ORPHAN_ADAPTIVE => "drop_orphan_adaptive.lua",
    ADAPTIVE_DECAY => "adaptive_decay.lua",
    REAP_REPORTERS => "reap_reporters.lua",
}

/// Loads every script on every primary (SCRIPT LOAD is routed to all nodes).
pub async fn load_all(conn: &mut redis::cluster_async::ClusterConnection) -> Result<()> {
    for lua in ALL {
        let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(lua.source()).query_async(conn).await?;
        if sha != lua.script().get_hash() {
            return Err(Error::internal(format!(
                "SCRIPT LOAD of {} returned {sha}, expected {}",
                lua.file,
                lua.script().get_hash()
            )));
        }
    }
    Ok(())
}

/// Reply codes below 0 are outcomes a script's caller handles itself (each names one outcome of
/// one kind of script), never a status sent to clients; a binding that does not expect one gets
/// an internal error from [`status_reply`]. Arguments kvcm itself got wrong are Lua error
/// replies (a bug: `INTERNAL_ERROR`, logged), never a status either.
///
/// `registry_add_storage` / `registry_update_storage`: the storages changed since the caller
/// read them; it reads them again and retries.
pub const CHANGED_MEANWHILE: i64 = -1;
/// `registry_set_storage_health`: the storage was removed since the worker read the registry.
pub const NO_SUCH_STORAGE: i64 = -2;
/// `start_write_cache`: another request's session has this session id (a 1 in 2^64 draw); the
/// frontend draws another and runs the script again.
pub const SESSION_ID_TAKEN: i64 = -3;

/// Maps a script's `{code, payload}` reply: code 1 gives the payload, any other code becomes a
/// domain error carrying the script's message.
pub fn status_reply(reply: (i64, String)) -> Result<String> {
    if reply.0 == StatusCode::OK.number() as i64 {
        return Ok(reply.1);
    }
    Err(reply_error(reply))
}

/// The error of a reply other than OK: a wire status becomes a domain error with the script's
/// message; a code no binding handled (below 0) is a bug.
pub fn reply_error((code, message): (i64, String)) -> Error {
    match StatusCode::from_number(code).filter(|c| *c != StatusCode::OK) {
        Some(code) => Error::status(code, message),
        None => Error::internal(format!("script returned unexpected status {code}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_has_a_documented_header() {
        for lua in ALL {
            let name = lua.file.trim_end_matches(".lua");
            assert!(
                lua.file_source.starts_with(&format!("-- {name}:")),
                "{} header must start with its name",
                lua.file
            );
            for section in ["KEYS[1]", "Reply:", "Example:"] {
                assert!(lua.file_source.contains(section), "{} header lacks {section}", lua.file);
            }
        }
    }

    #[test]
    fn a_script_carries_the_library_functions_it_calls_and_no_others() {
        let lib = "-- lib: header\nlocal X = 1\nlocal function one() return X end\n-- two: calls one\n\
                   local function two()\n  return one() + 1\nend\n-- unused, and so is its comment\n\
                   local function three()\n  return 3\nend\nlocal Y = 2\n";
        let out = with_lib(lib, "return two() + Y\n");
        assert_eq!(
            out,
            "-- lib: header\nlocal X = 1\nlocal function one() return X end\n-- two: calls one\n\
             local function two()\n  return one() + 1\nend\nlocal Y = 2\nreturn two() + Y\n"
        );
        // The write path's scripts: what they call (has_live reads a record in place, so the
        // location walkers it used to call are left out), not the rest of lib/record.lua.
        let start = START_WRITE_CACHE.source();
        for f in ["has_live", "rec_new", "rec_parent", "session_key", "session_loc"] {
            assert!(start.contains(&format!("local function {f}(")), "start_write_cache lacks {f}");
        }
        for f in ["unlink_serving", "drop_deleting", "queue_delete", "usage_add", "has_state", "locs"] {
            assert!(!start.contains(&format!("local function {f}(")), "start_write_cache carries {f}");
        }
        assert!(FINISH_WRITE_CACHE.source().contains("local function queue_delete("));
        // Library code outside functions keeps what it calls; every library parses.
        let out = with_lib("local function f()\n  return 1\nend\nlocal F = f()\n", "return F\n");
        assert!(out.contains("local function f()"), "{out}");
        for lua in ALL {
            assert!(lua.source().ends_with(lua.file_source), "{}", lua.file);
        }
        assert!(START_WRITE_CACHE.source().ends_with(START_WRITE_CACHE.file_source));
        assert!(START_WRITE_CACHE.source().contains("local HDR = 11"), "constants stay");
    }

    #[test]
    fn a_library_it_cannot_read_exactly_is_refused() {
        for lib in [
            "local function f()\n  return 1\nend -- f\nlocal function g()\n  return 2\nend\n",
            "local function f()\n  return 1\nlocal X = 2\nend\n",
            "local function f()\n  return 1\n",
        ] {
            assert!(std::panic::catch_unwind(|| with_lib(lib, "return 1\n")).is_err(), "{lib:?}");
        }
    }

    #[test]
    fn the_adaptive_constants_of_the_scripts_are_hit_densitys() {
        use crate::hit_density as h;
        let evict = format!(
            "local BUCKETS, SAMPLES, UNIT, GHOST_DIVISOR, RANK_WIDTH = {}, {}, {}, {}, {}\n",
            h::BUCKETS,
            h::SAMPLES,
            h::UNIT,
            h::GHOST_DIVISOR,
            h::RANK_WIDTH
        );
        assert!(EVICT.source().contains(&evict), "evict.lua lacks {evict:?}");
        let start = format!("local LONG_RUN = {}\n", h::LONG_RUN);
        assert!(START_WRITE_CACHE.source().contains(&start), "start_write_cache.lua lacks {start:?}");
        let last = format!("if b > {0} then return {0} end", h::BUCKETS - 1);
        assert!(EVICT.source().contains(&last), "record.lua's age_bucket lacks {last:?}");
        let cells = format!("if cells ~= {} then", h::CLASSES * h::BUCKETS);
        assert!(ADAPTIVE_DECAY.source().contains(&cells), "adaptive_decay.lua lacks {cells:?}");
        let ranks = format!("if #ARGV[4] ~= {} * {} or", h::CLASSES * h::BUCKETS, h::RANK_WIDTH);
        assert!(ADAPTIVE_DECAY.source().contains(&ranks), "adaptive_decay.lua lacks {ranks:?}");
    }

    #[test]
    fn every_lua_file_is_registered() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../lua");
        let registered: Vec<&str> = ALL.iter().map(|l| l.file).collect();
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".lua") {
                assert!(registered.contains(&name.as_str()), "{name} is not in scripts!");
            }
        }
    }
}
