//! Decoding the compact block records that the data-plane scripts write (layout documented in
//! `lua/lib/record.lua`; this is its only Rust reader). Records hold no URIs: a location is a
//! storage id, a spec group, a session number, a write time and, for packed files, the file's
//! identity and the block's slot in it; URIs are rebuilt by [`crate::backend`].

/// Where one block's bytes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub state: LocState,
    pub storage: u16,
    /// 0 = every spec; k = the instance's `location_spec_groups[k-1]`.
    pub group: u8,
    pub seq: u32,
    pub written: u32,
    pub packed: Option<Packed>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub blkid: u16,
    pub file_first: i64,
    pub file_hash: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocState {
    Writing,
    Serving,
    Deleting,
}

impl LocState {
    /// The `CLS_*` name getCacheMeta reports.
    pub fn cls_name(self) -> &'static str {
        match self {
            LocState::Writing => "CLS_WRITING",
            LocState::Serving => "CLS_SERVING",
            LocState::Deleting => "CLS_DELETING",
        }
    }
}

const HDR: usize = 11;
const NOT_PACKED: u16 = u16::MAX;

/// A decoded block record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockRecord {
    pub parent: Option<i64>,
    pub children: u16,
    pub locations: Vec<Location>,
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// Decodes one location starting at `p`; returns it and its length.
pub fn decode_location(b: &[u8], p: usize) -> Option<(Location, usize)> {
    let state = match *b.get(p)? {
        b'W' => LocState::Writing,
        b'S' => LocState::Serving,
        b'D' | b'X' => LocState::Deleting,
        _ => return None,
    };
    let storage = u16_at(b, p + 1)?;
    let group = *b.get(p + 3)?;
    let seq = u32_at(b, p + 4)?;
    let written = u32_at(b, p + 8)?;
    let blkid = u16_at(b, p + 12)?;
    let (packed, len) = if blkid == NOT_PACKED {
        (None, 14)
    } else {
        let file_first = i64::from_be_bytes(b.get(p + 14..p + 22)?.try_into().ok()?);
        (Some(Packed { blkid, file_first, file_hash: u32_at(b, p + 22)? }), 26)
    };
    Some((Location { state, storage, group, seq, written, packed }, len))
}

impl BlockRecord {
    /// Decodes a record; `None` if it is malformed (treated as a miss and logged by callers).
    pub fn decode(b: &[u8]) -> Option<BlockRecord> {
        if b.len() < HDR {
            return None;
        }
        let parent = (b[0] & 1 == 1).then(|| i64::from_be_bytes(b[1..9].try_into().unwrap_or_default()));
        let children = u16_at(b, 9)?;
        let mut locations = Vec::with_capacity(1);
        let mut p = HDR;
        while p < b.len() {
            let (loc, len) = decode_location(b, p)?;
            locations.push(loc);
            p += len;
        }
        Some(BlockRecord { parent, children, locations })
    }

    /// The first serving location whose storage `usable` accepts, else the first serving one.
    pub fn serving(&self, usable: impl Fn(u16) -> bool) -> Option<&Location> {
        let mut serving = self.locations.iter().filter(|l| l.state == LocState::Serving);
        let first = serving.clone().next();
        serving.find(|l| usable(l.storage)).or(first)
    }
}

/// Only the state and children of the serving location matter on the read path; this reads
/// them without allocating.
pub fn serving_view(b: &[u8]) -> Option<(Location, u16)> {
    if b.len() < HDR {
        return None;
    }
    let children = u16_at(b, 9)?;
    let mut p = HDR;
    while p < b.len() {
        let (loc, len) = decode_location(b, p)?;
        if loc.state == LocState::Serving {
            return Some((loc, children));
        }
        p += len;
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Encodes like the Lua scripts do (tests only: production records are written by Lua).
    pub fn encode(r: &BlockRecord) -> Vec<u8> {
        let mut b = Vec::new();
        b.push(r.parent.is_some() as u8);
        b.extend_from_slice(&r.parent.unwrap_or(0).to_be_bytes());
        b.extend_from_slice(&r.children.to_le_bytes());
        for l in &r.locations {
            b.push(match l.state {
                LocState::Writing => b'W',
                LocState::Serving => b'S',
                LocState::Deleting => b'D',
            });
            b.extend_from_slice(&l.storage.to_le_bytes());
            b.push(l.group);
            b.extend_from_slice(&l.seq.to_le_bytes());
            b.extend_from_slice(&l.written.to_le_bytes());
            match l.packed {
                None => b.extend_from_slice(&NOT_PACKED.to_le_bytes()),
                Some(p) => {
                    b.extend_from_slice(&p.blkid.to_le_bytes());
                    b.extend_from_slice(&p.file_first.to_be_bytes());
                    b.extend_from_slice(&p.file_hash.to_le_bytes());
                }
            }
        }
        b
    }

    #[test]
    fn records_round_trip_and_serving_prefers_usable_storages() {
        let loc = |state, storage, packed| Location { state, storage, group: 1, seq: 9, written: 77, packed };
        let r = BlockRecord {
            parent: Some(-5),
            children: 3,
            locations: vec![
                loc(LocState::Deleting, 1, None),
                loc(LocState::Serving, 2, Some(Packed { blkid: 3, file_first: i64::MIN, file_hash: 0xdead_beef })),
                loc(LocState::Serving, 4, None),
            ],
        };
        let bytes = encode(&r);
        assert_eq!(bytes.len(), 11 + 14 + 26 + 14);
        assert_eq!(BlockRecord::decode(&bytes), Some(r.clone()));
        assert_eq!(r.serving(|s| s == 4).unwrap().storage, 4);
        assert_eq!(r.serving(|_| false).unwrap().storage, 2, "falls back to any serving location");
        assert_eq!(serving_view(&bytes).map(|(l, c)| (l.storage, c)), Some((2, 3)));
        assert_eq!(BlockRecord::decode(&bytes[..bytes.len() - 1]), None, "truncated records are refused");
        let root = BlockRecord { parent: None, children: 0, locations: vec![] };
        assert_eq!(BlockRecord::decode(&encode(&root)), Some(root));
    }
}
