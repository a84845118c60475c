//! `kvcm-replay`: a fleet of simulated engines replaying a recorded trace against a running kvcm
//! over HTTP, to measure the hit rate kvcm really serves and set it beside the offline
//! optimizer's prediction for the same requests (see `docs/replay.md`).
//!
//! * [`cli`] — flags, reading the trace with the optimizer's readers, pacing (`--speedup`) and
//!   bounded concurrency, the prediction, the report.
//! * [`engine`] — one request as a connector makes it: prefix read, startWriteCache of the
//!   missing suffix, optional bytes to `file://` URIs, finishWriteCache.
//! * [`setup`] — optional creation of the storage, group (quota, watermark, policy) and instance.
//! * [`backpressure`] — optional pauses while the cache is over capacity by more than a margin,
//!   until the worker's reclaimer catches up (read from the worker's metrics).
//! * [`client`] — HTTP calls with credentials, deadlines and error kinds.
//! * [`report`] — counters, latency percentiles per RPC, errors by kind; text or JSON.
//!
//! It fails fast on a bad trace, bad flags or a failed setup; RPC failures during the replay are
//! counted, never fatal.

pub mod backpressure;
pub mod cli;
pub mod client;
pub mod engine;
pub mod report;
pub mod setup;
