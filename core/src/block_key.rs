//! Block keys (DESIGN §2.2): requests name blocks by engine-computed `block_keys`, or by
//! `token_ids` that kvcm hashes itself with the running hash RTP-LLM uses. The key of block `i`
//! is the hash state after the last token of block `i`, so a key determines its whole prefix
//! (parent chaining is implicit) and the keys of a prefix are a prefix of the keys.

use crate::error::{Error, Result};

/// One step of the running token hash (wrapping 64-bit arithmetic; `>>` is arithmetic).
#[inline]
fn step(h: i64, token: i64) -> i64 {
    h ^ token.wrapping_add(0x9e37_79b9_7f4a_7c15_u64 as i64).wrapping_add(h.wrapping_shl(12)).wrapping_add(h >> 32)
}

/// Keys of the full blocks of `tokens` (a trailing partial block is dropped).
pub fn keys_from_tokens(tokens: &[i64], block_size: usize) -> Vec<i64> {
    if block_size == 0 {
        return Vec::new();
    }
    let mut keys = Vec::with_capacity(tokens.len() / block_size);
    let mut h = 0i64;
    for block in tokens.chunks_exact(block_size) {
        for &t in block {
            h = step(h, t);
        }
        keys.push(h);
    }
    keys
}

/// The request's block keys: `block_keys` if non-empty (used as given), else the keys of
/// `token_ids` cut into the instance's blocks. Empty results are an error naming both fields.
pub fn request_keys(block_keys: &[i64], token_ids: &[i64], block_size: i32, max_keys: usize) -> Result<Vec<i64>> {
    let keys = if !block_keys.is_empty() {
        block_keys.to_vec()
    } else {
        keys_from_tokens(token_ids, block_size.max(0) as usize)
    };
    if keys.is_empty() {
        return Err(if token_ids.is_empty() {
            Error::invalid("block_keys and token_ids are both empty; send one of them")
        } else {
            Error::invalid(format!(
                "token_ids has {} tokens, fewer than one block of {block_size}; no block to look up",
                token_ids.len()
            ))
        });
    }
    if keys.len() > max_keys {
        return Err(Error::invalid(format!(
            "{} blocks in one request; the limit is {max_keys} (split the request)",
            keys.len()
        )));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn design_test_vectors() {
        assert_eq!(keys_from_tokens(&[1, 2, 3, 4], 4), vec![455111481605203084]);
        assert_eq!(keys_from_tokens(&(1..=9).collect::<Vec<_>>(), 4), vec![455111481605203084, 6902853672176602142]);
        assert_eq!(keys_from_tokens(&(0..=15).collect::<Vec<_>>(), 8), vec![6713779586671547074, 6556265598806870907]);
        assert_eq!(keys_from_tokens(&[-5, -1, 123456789012345, -987654321], 4), vec![1968000746261805925]);
    }

    #[test]
    fn block_keys_win_over_token_ids_and_empty_requests_are_refused() {
        assert_eq!(request_keys(&[7], &[1, 2, 3, 4], 4, 10).unwrap(), vec![7]);
        assert!(request_keys(&[], &[], 4, 10).unwrap_err().to_string().contains("both empty"));
        assert!(request_keys(&[], &[1, 2], 4, 10).unwrap_err().to_string().contains("fewer than one block"));
        assert!(request_keys(&[1, 2, 3], &[], 4, 2).unwrap_err().to_string().contains("limit is 2"));
    }

    proptest! {
        #[test]
        fn keys_of_a_prefix_are_a_prefix_of_the_keys(
            tokens in proptest::collection::vec(any::<i64>(), 0..200),
            cut in 0usize..200,
            block in 1usize..17,
        ) {
            let all = keys_from_tokens(&tokens, block);
            let prefix = keys_from_tokens(&tokens[..cut.min(tokens.len())], block);
            prop_assert_eq!(&all[..prefix.len()], &prefix[..]);
            prop_assert_eq!(all.len(), tokens.len() / block);
        }

        #[test]
        fn a_different_earlier_token_changes_every_later_key(
            tokens in proptest::collection::vec(any::<i64>(), 8..64),
            at in 0usize..8,
            delta in 1i64..1000,
        ) {
            let mut other = tokens.clone();
            other[at] = other[at].wrapping_add(delta);
            let (a, b) = (keys_from_tokens(&tokens, 4), keys_from_tokens(&other, 4));
            for i in at / 4..a.len() {
                prop_assert_ne!(a[i], b[i]);
            }
        }
    }
}
