//! Wire (JSON) types of the Tair KVCM HTTP protocol, DESIGN §2.
//!
//! These are plain serde structs that mirror the protobuf messages field for field. They are
//! converted into validated domain types at the API edge; nothing below the API takes them as
//! trusted input.

pub mod admin;
pub mod codec;
pub mod common;
pub mod debug;
pub mod meta;

pub use common::*;
