//! The vendored redis crate decodes common replies with a hand-written fast path
//! (vendor/redis/KVCM-PATCH.md). Whatever the reply and however it arrives in pieces, the
//! connection's codec must produce exactly what combine's decoder produces for it.

use bytes::BytesMut;
use proptest::prelude::*;
use redis::{Value, ValueCodec};
use tokio_util::codec::Decoder;

/// A reply as RESP bytes: the shapes the fast path takes and the ones it hands to combine.
#[derive(Debug, Clone)]
enum Reply {
    Bulk(Vec<u8>),
    NullBulk,
    NullArray,
    Null3,
    Int(i64),
    Simple(String),
    Error(String),
    Double(String),
    Map(Vec<(Reply, Reply)>),
    Array(Vec<Reply>),
}

impl Reply {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::NullBulk => out.extend_from_slice(b"$-1\r\n"),
            Reply::NullArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Null3 => out.extend_from_slice(b"_\r\n"),
            Reply::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Reply::Simple(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Reply::Error(s) => out.extend_from_slice(format!("-{s}\r\n").as_bytes()),
            Reply::Double(s) => out.extend_from_slice(format!(",{s}\r\n").as_bytes()),
            Reply::Map(kv) => {
                out.extend_from_slice(format!("%{}\r\n", kv.len()).as_bytes());
                for (k, v) in kv {
                    k.encode(out);
                    v.encode(out);
                }
            }
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for i in items {
                    i.encode(out);
                }
            }
        }
    }
}

fn reply() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        6 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Reply::Bulk),
        // Bytes that look like protocol inside a bulk string.
        1 => Just(Reply::Bulk(b"$3\r\n*1\r\n:1\r\n".to_vec())),
        1 => Just(Reply::NullBulk),
        1 => Just(Reply::NullArray),
        1 => Just(Reply::Null3),
        2 => any::<i64>().prop_map(Reply::Int),
        1 => Just(Reply::Simple("OK".into())),
        1 => "[a-zA-Z0-9 ]{0,12}".prop_map(Reply::Simple),
        1 => "(ERR|MOVED|TRYAGAIN|CLUSTERDOWN) [a-z0-9 ]{0,10}".prop_map(Reply::Error),
        1 => Just(Reply::Double("1.5".into())),
    ];
    leaf.prop_recursive(4, 64, 16, |inner| {
        prop_oneof![
            6 => proptest::collection::vec(inner.clone(), 0..16).prop_map(Reply::Array),
            1 => proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Reply::Map),
        ]
    })
}

/// Feeds `bytes` to a codec in the given pieces, decoding after each, as a connection does.
fn decode_in_pieces(bytes: &[u8], cuts: &[usize]) -> Vec<Value> {
    let mut codec = ValueCodec::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    bounds.sort_unstable();
    bounds.push(bytes.len());
    for end in bounds {
        if end < at {
            continue;
        }
        buf.extend_from_slice(&bytes[at..end]);
        at = end;
        while let Some(v) = codec.decode(&mut buf).expect("decodes") {
            out.push(v);
        }
    }
    assert!(buf.is_empty(), "{} bytes left undecoded", buf.len());
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn fast_path_decodes_what_combine_decodes(
        replies in proptest::collection::vec(reply(), 1..4),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut bytes = Vec::new();
        let mut expected = Vec::new();
        for r in &replies {
            let mut one = Vec::new();
            r.encode(&mut one);
            expected.push(redis::parse_redis_value(&one).expect("combine decodes it"));
            bytes.extend_from_slice(&one);
        }
        prop_assert_eq!(decode_in_pieces(&bytes, &cuts), expected);
    }
}

#[test]
fn a_large_reply_arriving_byte_by_byte_decodes_once_whole() {
    let items: Vec<Reply> = (0..2000).map(|i| Reply::Bulk(format!("record-{i}").into_bytes())).collect();
    let mut bytes = Vec::new();
    Reply::Array(items).encode(&mut bytes);
    let cuts: Vec<usize> = (0..bytes.len()).step_by(7).collect();
    let got = decode_in_pieces(&bytes, &cuts);
    assert_eq!(got, vec![redis::parse_redis_value(&bytes).unwrap()]);
}

#[test]
fn malformed_replies_get_combines_error() {
    for bad in [&b"*2\r\n$3\r\nabcXY"[..], b"$3\r\nabcd\r\n", b":12a\r\n", b"?\r\n"] {
        let mut codec = ValueCodec::default();
        let mut buf = BytesMut::from(bad);
        let fast = codec.decode(&mut buf).and_then(|v| match v {
            Some(v) => Ok(Some(v)),
            None => codec.decode_eof(&mut buf),
        });
        assert!(fast.is_err(), "{:?} decoded as {fast:?}", String::from_utf8_lossy(bad));
        assert!(redis::parse_redis_value(bad).is_err());
    }
}

/// Decodes `bytes` as one stream that then ends: every reply, or the error.
fn decode_to_end(bytes: &[u8]) -> Result<Vec<Value>, redis::RedisError> {
    let mut codec = ValueCodec::default();
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(v) = codec.decode(&mut buf)? {
        out.push(v);
    }
    while let Some(v) = codec.decode_eof(&mut buf)? {
        out.push(v);
    }
    Ok(out)
}

#[test]
fn odd_numbers_and_deep_nesting_decode_as_combine_decodes_them() {
    let mut cases: Vec<Vec<u8>> = [
        &b":+3\r\n"[..],
        b": 3\r\n",
        b":003\r\n",
        b":-0\r\n",
        b":1234567890123456789\r\n",
        b":-9223372036854775808\r\n",
        b"$-2\r\n",
        b"*-2\r\n",
        b"+\xff\xfe\r\n",
        b"_x\r\n",
        b"*1\r\n-ERR inside\r\n",
        b">2\r\n+message\r\n$1\r\nx\r\n",
        b"~1\r\n:1\r\n",
    ]
    .iter()
    .map(|c| c.to_vec())
    .collect();
    for depth in [63, 64, 65, 99, 100, 101, 120] {
        let mut deep = b"*1\r\n".repeat(depth);
        deep.extend_from_slice(b":7\r\n");
        cases.push(deep);
    }
    for case in cases {
        let combine = redis::parse_redis_value(&case).map(|v| vec![v]).map_err(|e| e.kind());
        let ours = decode_to_end(&case).map_err(|e| e.kind());
        assert_eq!(ours, combine, "{:?}", String::from_utf8_lossy(&case));
    }
}

#[test]
fn a_stream_that_ends_inside_a_reply_is_a_dropped_connection() {
    for cut in [&b"*2\r\n"[..], b"*2\r\n$3\r\nabc\r\n", b"$10\r\nabc", b"*3\r\n:1\r\n:2"] {
        let err = decode_to_end(cut).expect_err("a cut-off reply");
        assert!(err.is_io_error() && err.is_connection_dropped(), "{:?}: {err:?}", String::from_utf8_lossy(cut));
    }
}
