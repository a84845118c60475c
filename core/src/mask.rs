//! `BlockMask` as a domain type: which of a request's blocks are "in the mask". Both wire forms
//! (`{offset: n}` and `{bool_masks: {values}}`) are validated against the number of keys.

use crate::error::{Error, Result};
use crate::wire::{BoolMasks, WireBlockMask};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockMask {
    /// Indices `< n` are in the mask.
    Offset(usize),
    /// Index `i` is in the mask iff `values[i]`.
    Bools(Vec<bool>),
}

impl BlockMask {
    /// Parses a wire mask for a request of `n` keys. Absent means "nothing masked".
    pub fn parse(field: &str, wire: Option<&WireBlockMask>, n: usize) -> Result<BlockMask> {
        let Some(w) = wire else { return Ok(BlockMask::Offset(0)) };
        match (w.offset, w.bool_masks.as_ref()) {
            (Some(_), Some(_)) => Err(Error::invalid(format!("{field} sets both offset and bool_masks; send one"))),
            (Some(o), None) if o < 0 || o as usize > n => {
                Err(Error::invalid(format!("{field}.offset {o} is outside 0..={n} (the number of blocks)")))
            }
            (Some(o), None) => Ok(BlockMask::Offset(o as usize)),
            (None, Some(b)) if b.values.len() != n => Err(Error::invalid(format!(
                "{field}.bool_masks has {} values for {n} blocks; it needs exactly one per block",
                b.values.len()
            ))),
            (None, Some(b)) => Ok(BlockMask::Bools(b.values.clone())),
            (None, None) => Ok(BlockMask::Offset(0)),
        }
    }

    /// Whether index `i` is in the mask.
    pub fn contains(&self, i: usize) -> bool {
        match self {
            BlockMask::Offset(n) => i < *n,
            BlockMask::Bools(v) => v.get(i).copied().unwrap_or(false),
        }
    }

    /// The wire form.
    pub fn to_wire(&self) -> WireBlockMask {
        match self {
            BlockMask::Offset(n) => WireBlockMask { offset: Some(*n as i32), bool_masks: None },
            BlockMask::Bools(v) => WireBlockMask { offset: None, bool_masks: Some(BoolMasks { values: v.clone() }) },
        }
    }

    /// The compact mask of a set of flags: an offset if the `true`s form a prefix, else bools.
    pub fn from_flags(flags: &[bool]) -> BlockMask {
        let k = flags.iter().take_while(|f| **f).count();
        if flags[k..].iter().all(|f| !*f) { BlockMask::Offset(k) } else { BlockMask::Bools(flags.to_vec()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(offset: Option<i32>, bools: Option<Vec<bool>>) -> WireBlockMask {
        WireBlockMask { offset, bool_masks: bools.map(|values| BoolMasks { values }) }
    }

    #[test]
    fn both_forms_parse_and_malformed_masks_are_refused() {
        assert_eq!(BlockMask::parse("m", None, 3).unwrap(), BlockMask::Offset(0));
        assert_eq!(BlockMask::parse("m", Some(&wire(Some(3), None)), 3).unwrap(), BlockMask::Offset(3));
        assert!(
            BlockMask::parse("m", Some(&wire(Some(4), None)), 3).unwrap_err().to_string().contains("outside 0..=3")
        );
        assert!(BlockMask::parse("m", Some(&wire(Some(-1), None)), 3).is_err());
        assert!(
            BlockMask::parse("m", Some(&wire(None, Some(vec![true]))), 3)
                .unwrap_err()
                .to_string()
                .contains("1 values for 3")
        );
        assert!(
            BlockMask::parse("m", Some(&wire(Some(1), Some(vec![true]))), 1).unwrap_err().to_string().contains("both")
        );
        let m = BlockMask::parse("m", Some(&wire(None, Some(vec![false, true, false]))), 3).unwrap();
        assert_eq!((m.contains(0), m.contains(1), m.contains(2)), (false, true, false));
    }

    #[test]
    fn flags_become_an_offset_when_they_form_a_prefix() {
        assert_eq!(BlockMask::from_flags(&[true, true, false]), BlockMask::Offset(2));
        assert_eq!(BlockMask::from_flags(&[false, false]), BlockMask::Offset(0));
        assert_eq!(BlockMask::from_flags(&[true, true]), BlockMask::Offset(2));
        assert_eq!(BlockMask::from_flags(&[false, true]), BlockMask::Bools(vec![false, true]));
    }
}
