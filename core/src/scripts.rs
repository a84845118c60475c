//! The script registry: every Lua file in `lua/`, compiled into the binary (data-plane scripts
//! after `lua/lib/record.lua`, credential scripts after `lua/lib/accounts.lua`), and the one
//! function that turns a script's `{code, payload}` reply into a typed result.
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
    /// What Valkey runs: the file, after `lua/lib/record.lua` for data-plane scripts.
    pub source: &'static str,
    script: OnceLock<Script>,
}

impl LuaScript {
    const fn new(file: &'static str, file_source: &'static str, source: &'static str) -> Self {
        LuaScript { file, file_source, source, script: OnceLock::new() }
    }

    /// The script, ready for `.key(..).arg(..).invoke_async(..)` (EVALSHA, NOSCRIPT fallback).
    pub fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::new(self.source))
    }
}

macro_rules! scripts {
    (registry: $($name:ident => $file:literal),+ ;
     credentials: $($cname:ident => $cfile:literal),+ ;
     data: $($dname:ident => $dfile:literal),+ $(,)?) => {
        $(
            #[doc = concat!("`lua/", $file, "`")]
            pub static $name: LuaScript = LuaScript::new(
                $file,
                include_str!(concat!("../../lua/", $file)),
                include_str!(concat!("../../lua/", $file)),
            );
        )+
        $(
            #[doc = concat!("`lua/", $cfile, "` (after `lua/lib/accounts.lua`)")]
            pub static $cname: LuaScript = LuaScript::new(
                $cfile,
                include_str!(concat!("../../lua/", $cfile)),
                concat!(include_str!("../../lua/lib/accounts.lua"), include_str!(concat!("../../lua/", $cfile))),
            );
        )+
        $(
            #[doc = concat!("`lua/", $dfile, "` (after `lua/lib/record.lua`)")]
            pub static $dname: LuaScript = LuaScript::new(
                $dfile,
                include_str!(concat!("../../lua/", $dfile)),
                concat!(include_str!("../../lua/lib/record.lua"), include_str!(concat!("../../lua/", $dfile))),
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
    REAP_REPORTERS => "reap_reporters.lua",
}

/// Loads every script on every primary (SCRIPT LOAD is routed to all nodes).
pub async fn load_all(conn: &mut redis::cluster_async::ClusterConnection) -> Result<()> {
    for lua in ALL {
        let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(lua.source).query_async(conn).await?;
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
