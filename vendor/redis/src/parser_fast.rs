//! kvcm patch: a fast path for decoding RESP replies (see vendor/redis/KVCM-PATCH.md).
//!
//! combine's general, resumable parser costs ~200 ns per element; a kvcm read of 20,000 blocks
//! is one HMGET reply of 20,000 bulk strings, so decoding it took longer than Valkey took to
//! answer. This module decodes the common reply shapes by hand, in two passes over a reply that
//! has fully arrived:
//!
//! * [`Scan::scan`] walks the buffer without allocating per element and tells whether one
//!   whole reply is there. It is resumable: a large reply arriving over many socket reads is scanned once, not
//!   from its start on every read.
//! * [`parse`] then builds the [`Value`], exactly as combine would have.
//!
//! Only arrays (`*`), bulk strings (`$`), integers (`:`), simple strings (`+`) and RESP3 nulls
//! (`_`) are handled, with plain decimal lengths. Anything else anywhere in a reply (errors,
//! maps, sets, pushes, doubles, verbatim strings, attributes, a length combine would trim or
//! reject, nesting deeper than combine allows) makes the scan answer `Unsupported`, and the
//! caller hands the whole reply to combine, whose values and errors are unchanged (only the
//! byte positions in its error messages can differ). A stream that ends inside a reply is a
//! dropped connection (`UnexpectedEof`), as for the synchronous parser.

use crate::types::Value;

/// Deepest nesting the fast path takes on; combine refuses replies nested deeper than 100.
const MAX_DEPTH: usize = 64;

/// What a scan found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scanned {
    /// One whole reply of this many bytes is at the start of the buffer.
    Complete(usize),
    /// The reply so far is supported, and more bytes are needed.
    Incomplete,
    /// The reply has something the fast path does not decode: let combine do it.
    Unsupported,
}

/// A resumable scan of the reply at the start of a buffer that only grows between calls (until
/// [`Scan::reset`], once the reply is consumed or handed over).
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Bytes scanned so far: a prefix of the reply, ending on an element boundary.
    pos: usize,
    /// Elements still expected by each open array, outermost first; empty before the scan starts.
    open: Vec<usize>,
    started: bool,
}

/// A header line `<type><digits>\r\n` at `pos`: (type, the line's payload, the offset after it).
fn line(buf: &[u8], pos: usize) -> Option<(u8, &[u8], usize)> {
    let rest = buf.get(pos + 1..)?;
    let end = memchr_crlf(rest)?;
    Some((buf[pos], &rest[..end], pos + 1 + end + 2))
}

fn memchr_crlf(s: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].iter().position(|&b| b == b'\r') {
        let at = from + i;
        if at + 1 >= s.len() {
            return None;
        }
        if s[at + 1] == b'\n' {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// A length or integer as plain decimal (an optional '-', then 1..=18 digits); `None` for
/// anything else, which combine then judges.
fn decimal(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().fold(0i64, |acc, d| acc * 10 + (d - b'0') as i64);
    Some(if neg { -v } else { v })
}

impl Scan {
    pub(crate) fn reset(&mut self) {
        self.pos = 0;
        self.open.clear();
        self.started = false;
    }

    /// Scans on from where the last call stopped. `buf` must start with the same reply as at
    /// the last call (bytes are only ever appended until [`Scan::reset`]).
    pub(crate) fn scan(&mut self, buf: &[u8]) -> Scanned {
        if self.started && buf.len() < self.pos {
            // Not the buffer scanned before (it never shrinks mid-reply): start over.
            self.reset();
        }
        if !self.started {
            if buf.is_empty() {
                return Scanned::Incomplete;
            }
            self.started = true;
            self.pos = 0;
            self.open.clear();
            self.open.push(1);
        }
        loop {
            while self.open.last() == Some(&0) {
                self.open.pop();
            }
            if self.open.is_empty() {
                return Scanned::Complete(self.pos);
            }
            if self.pos >= buf.len() {
                return Scanned::Incomplete;
            }
            if !matches!(buf[self.pos], b'*' | b'$' | b':' | b'+' | b'_') {
                return Scanned::Unsupported;
            }
            let Some((kind, payload, next)) = line(buf, self.pos) else {
                return Scanned::Incomplete;
            };
            let next = match kind {
                b'+' if std::str::from_utf8(payload).is_err() => return Scanned::Unsupported,
                b'+' => next,
                b'_' if !payload.is_empty() => return Scanned::Unsupported,
                b'_' => next,
                b':' if decimal(payload).is_none() => return Scanned::Unsupported,
                b':' => next,
                b'$' => match decimal(payload) {
                    Some(-1) => next,
                    Some(n) if n >= 0 => {
                        let end = next + n as usize;
                        if buf.len() < end + 2 {
                            return Scanned::Incomplete;
                        }
                        if &buf[end..end + 2] != b"\r\n" {
                            return Scanned::Unsupported;
                        }
                        end + 2
                    }
                    _ => return Scanned::Unsupported,
                },
                _ => match decimal(payload) {
                    // '*'
                    Some(-1) => next,
                    Some(n) if n >= 0 => {
                        if self.open.len() >= MAX_DEPTH {
                            return Scanned::Unsupported;
                        }
                        *self.open.last_mut().expect("checked non-empty") -= 1;
                        self.open.push(n as usize);
                        self.pos = next;
                        continue;
                    }
                    _ => return Scanned::Unsupported,
                },
            };
            *self.open.last_mut().expect("checked non-empty") -= 1;
            self.pos = next;
        }
    }
}

/// Builds the value of one whole reply that [`Scan::scan`] found `Complete` and supported;
/// `None` (never expected: the caller then lets combine decode it) if it is not what the scan
/// saw.
pub(crate) fn parse(buf: &[u8]) -> Option<Value> {
    let mut pos = 0;
    value(buf, &mut pos, 0)
}

fn value(buf: &[u8], pos: &mut usize, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let (kind, payload, next) = line(buf, *pos)?;
    *pos = next;
    Some(match kind {
        b'+' => {
            let s = std::str::from_utf8(payload).ok()?;
            if s == "OK" { Value::Okay } else { Value::SimpleString(s.to_owned()) }
        }
        b'_' => Value::Nil,
        b':' => Value::Int(decimal(payload)?),
        b'$' => match decimal(payload)? {
            -1 => Value::Nil,
            n if n >= 0 => {
                let end = next.checked_add(n as usize)?;
                let v = buf.get(next..end)?.to_vec();
                *pos = end + 2;
                Value::BulkString(v)
            }
            _ => return None,
        },
        b'*' => match decimal(payload)? {
            -1 => Value::Nil,
            n if n >= 0 => {
                // Bounded by the reply's bytes: each element takes at least 3.
                let mut items = Vec::with_capacity((n as usize).min(buf.len() / 3));
                for _ in 0..n {
                    items.push(value(buf, pos, depth + 1)?);
                }
                Value::Array(items)
            }
            _ => return None,
        },
        _ => return None,
    })
}
