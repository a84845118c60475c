//! Serde helpers for the Tair KVCM JSON conventions (proto3 JSON mapping).
//!
//! * 64-bit integers are written as JSON strings and read from numbers or strings
//!   ([`int64`], [`int64_vec`], [`uint64`]).
//! * Enums are written as their names and read from names or numbers ([`wire_enum!`]).
//!
//! Deserializers fail with a message that names what was expected; the API turns these into
//! `INVALID_ARGUMENT` (or HTTP 400 when the body is not JSON at all).
//!
//! Each convention also has its OpenAPI schema here, next to the code that implements it, so
//! the description (`api/src/openapi.rs`) says what these functions really accept and write:
//! [`Int64`] and [`UInt64`] for the 64-bit fields (`#[schema(value_type = Int64)]`), and
//! [`enum_schema`], which [`wire_enum!`] implements `ToSchema` with for every enum.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type};
use utoipa::{PartialSchema, ToSchema};

/// Re-exported for [`wire_enum!`], whose expansions live in other modules and crates.
#[doc(hidden)]
pub use utoipa as __utoipa;

/// The largest integer an f64 holds exactly (2^53).
const MAX_EXACT_F64: f64 = 9_007_199_254_740_992.0;

/// Parses an i64 written either as a JSON number or as a decimal string.
struct I64Visitor;

impl Visitor<'_> for I64Visitor {
    type Value = i64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a 64-bit integer (number or decimal string)")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::custom(format!("{v} does not fit a signed 64-bit integer")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i64, E> {
        // A JSON number written with a fraction or exponent arrives as f64. Only values an f64
        // holds exactly are accepted: beyond 2^53 it has already been rounded (a block key
        // would silently change), and at ±2^63 it has been clamped.
        // Strictly below 2^53: 2^53 + 1 written as a float rounds to 2^53 itself.
        if v.fract() == 0.0 && v.abs() < MAX_EXACT_F64 {
            Ok(v as i64)
        } else if v.fract() == 0.0 {
            Err(E::custom(format!(
                "{v} is too large to be exact as a number with a fraction or exponent; send it as a string"
            )))
        } else {
            Err(E::custom(format!("{v} is not an integer")))
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
        v.trim().parse::<i64>().map_err(|_| E::custom(format!("\"{v}\" is not a 64-bit integer")))
    }
    fn visit_unit<E: de::Error>(self) -> Result<i64, E> {
        Ok(0)
    }
}

/// `#[serde(with = "int64")]` for `i64` fields: string out, number or string in.
pub mod int64 {
    use super::*;
    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        d.deserialize_any(I64Visitor)
    }
}

/// `#[serde(with = "uint64")]` for non-negative 64-bit fields (capacities, versions).
pub mod uint64 {
    use super::*;
    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let v = d.deserialize_any(U64Visitor)?;
        Ok(v)
    }
    struct U64Visitor;
    impl Visitor<'_> for U64Visitor {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a non-negative 64-bit integer (number or decimal string)")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative")))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            // As for i64: only what an f64 holds exactly.
            if v.fract() == 0.0 && (0.0..MAX_EXACT_F64).contains(&v) {
                Ok(v as u64)
            } else {
                Err(E::custom(format!("{v} is not an exact non-negative integer; send it as a string")))
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            v.trim().parse::<u64>().map_err(|_| E::custom(format!("\"{v}\" is not a non-negative 64-bit integer")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }
    }
}

/// `#[serde(with = "int64_vec")]` for `Vec<i64>` fields; `null` reads as empty.
pub mod int64_vec {
    use super::*;
    use serde::ser::SerializeSeq;

    pub fn serialize<S: Serializer>(v: &[i64], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        let mut buf = itoa_buf::Buf::default();
        for x in v {
            seq.serialize_element(buf.format(*x))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
        struct SeqVisitor;
        impl<'de> Visitor<'de> for SeqVisitor {
            type Value = Vec<i64>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of 64-bit integers")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Vec<i64>, E> {
                Ok(Vec::new())
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Vec<i64>, A::Error> {
                let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(Elem(v)) = a.next_element()? {
                    out.push(v);
                }
                Ok(out)
            }
        }
        struct Elem(i64);
        impl<'de> Deserialize<'de> for Elem {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(I64Visitor).map(Elem)
            }
        }
        d.deserialize_any(SeqVisitor)
    }

    /// A tiny stack buffer for formatting integers without allocating per element.
    mod itoa_buf {
        use std::io::Write;
        #[derive(Default)]
        pub struct Buf([u8; 24]);
        impl Buf {
            pub fn format(&mut self, v: i64) -> &str {
                let mut cursor = std::io::Cursor::new(&mut self.0[..]);
                // 24 bytes always hold an i64 in decimal.
                let _ = write!(cursor, "{v}");
                let n = cursor.position() as usize;
                std::str::from_utf8(&self.0[..n]).unwrap_or("0")
            }
        }
    }
}

/// Null-tolerant deserialization for any `Default` field: `"x": null` reads as the default,
/// as protobuf JSON parsers do.
pub fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

// ---- OpenAPI schemas of the conventions ----

/// The OpenAPI schema of `#[serde(with = "int64")]` fields (and, as `Vec<Int64>`, of
/// `int64_vec` ones): a JSON integer in the signed 64-bit range, or a decimal string that
/// [`int64`] parses, or `null` (read as 0). Responses always carry the string form.
#[derive(Debug)]
pub struct Int64;

/// The OpenAPI schema of `#[serde(with = "uint64")]` fields, like [`Int64`] for `u64`.
#[derive(Debug)]
pub struct UInt64;

impl PartialSchema for Int64 {
    fn schema() -> RefOr<Schema> {
        integer_or_string(
            "A signed 64-bit integer. Responses write it as a decimal string (`\"-42\"`), as protobuf JSON does; \
             requests may send a JSON number or a decimal string (sign and leading zeros allowed; surrounding \
             whitespace is ignored). `null` reads as 0.",
            SchemaFormat::KnownFormat(KnownFormat::Int64),
            (i64::MIN as isize, i64::MAX as usize),
            int64_pattern(),
        )
    }
}

impl ToSchema for Int64 {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Int64")
    }
}

impl PartialSchema for UInt64 {
    fn schema() -> RefOr<Schema> {
        integer_or_string(
            "A non-negative 64-bit integer. Responses write it as a decimal string (`\"42\"`), as protobuf JSON \
             does; requests may send a JSON number or a decimal string (leading `+` and zeros allowed; surrounding \
             whitespace is ignored). `null` reads as 0.",
            SchemaFormat::Custom("uint64".into()),
            (0, u64::MAX as usize),
            uint64_pattern(),
        )
    }
}

impl ToSchema for UInt64 {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("UInt64")
    }
}

/// The decimal strings [`int64`] reads (without surrounding whitespace, which it trims).
fn int64_pattern() -> String {
    let (max, min) = (decimal_at_most(i64::MAX as u128), decimal_at_most(i64::MIN.unsigned_abs() as u128));
    format!(r"^(?:\+?0*{max}|-0*{min})$")
}

/// The decimal strings [`uint64`] reads (without surrounding whitespace, which it trims).
fn uint64_pattern() -> String {
    format!(r"^\+?0*{}$", decimal_at_most(u64::MAX as u128))
}

/// One of: an integer in `min..=max`, a string matching `pattern`, `null`.
fn integer_or_string(
    description: &str,
    format: SchemaFormat,
    (min, max): (isize, usize),
    pattern: String,
) -> RefOr<Schema> {
    OneOfBuilder::new()
        .description(Some(description))
        .item(
            ObjectBuilder::new()
                .title(Some("number"))
                .schema_type(Type::Integer)
                .format(Some(format))
                .minimum(Some(min))
                .maximum(Some(max)),
        )
        .item(ObjectBuilder::new().title(Some("decimal string")).schema_type(Type::String).pattern(Some(pattern)))
        .item(ObjectBuilder::new().title(Some("null")).schema_type(Type::Null))
        .into()
}

/// An ECMA-262 regex group matching exactly the decimal numerals of `0..=max` (no sign; the
/// caller puts `0*` before it for leading zeros): numerals with fewer digits than `max`, then,
/// for each digit of `max`, those that agree with `max` before it and are smaller at it, then
/// `max` itself. For `i64::MAX`: `(?:[0-9]{1,18}|[1-8][0-9]{18}|9[0-1][0-9]{17}|…|9223372036854775807)`.
fn decimal_at_most(max: u128) -> String {
    let digits = max.to_string();
    let n = digits.len();
    let mut alternatives = Vec::new();
    if n > 1 {
        alternatives.push(format!("[0-9]{{1,{}}}", n - 1));
    }
    for (i, d) in digits.bytes().enumerate() {
        let low = if i == 0 && n > 1 { b'1' } else { b'0' };
        if d > low {
            let class =
                if d - 1 == low { (low as char).to_string() } else { format!("[{}-{}]", low as char, (d - 1) as char) };
            let rest = match n - i - 1 {
                0 => String::new(),
                1 => "[0-9]".to_string(),
                k => format!("[0-9]{{{k}}}"),
            };
            alternatives.push(format!("{}{class}{rest}", &digits[..i]));
        }
    }
    alternatives.push(digits);
    format!("(?:{})", alternatives.join("|"))
}

/// The OpenAPI schema of a [`wire_enum!`] enum: its name, or (in requests) its number, or
/// `null` (read as the first value). Responses always carry the name.
#[doc(hidden)]
pub fn enum_schema(enum_name: &str, values: &[(&str, i64)]) -> RefOr<Schema> {
    let table = values.iter().map(|(n, v)| format!("`{n}` = {v}")).collect::<Vec<_>>().join(", ");
    OneOfBuilder::new()
        .description(Some(format!(
            "A `{enum_name}`, written as its name; requests may also send its number, and `null` reads as `{}`. \
             Values: {table}.",
            values[0].0
        )))
        .item(
            ObjectBuilder::new()
                .title(Some(format!("{enum_name}Name")))
                .schema_type(Type::String)
                .enum_values(Some(values.iter().map(|(n, _)| *n))),
        )
        .item(
            ObjectBuilder::new()
                .title(Some(format!("{enum_name}Number")))
                .schema_type(Type::Integer)
                .enum_values(Some(values.iter().map(|(_, v)| *v))),
        )
        .item(ObjectBuilder::new().title(Some("null")).schema_type(Type::Null))
        .into()
}

/// Declares a protobuf enum: written as its name, read from its name or its number.
/// Unknown names or numbers are an error naming the enum and the accepted names. Its OpenAPI
/// schema ([`enum_schema`]) says the same, so every enum is described alike.
#[macro_export]
macro_rules! wire_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $num:expr),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[allow(non_camel_case_types, clippy::upper_case_acronyms, reason = "variants are the protocol's enum names")]
        pub enum $name { #[default] $($(#[$vmeta])* $variant = $num),+ }

        impl $name {
            /// All variants, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The protocol name of this value.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),+ }
            }
            /// The protocol number of this value.
            pub fn number(self) -> i32 { self as i32 }
            /// Looks a value up by protocol number.
            pub fn from_number(n: i64) -> Option<Self> {
                match n { $(x if x == $num => Some($name::$variant),)+ _ => None }
            }
            /// Looks a value up by protocol name.
            pub fn from_name(s: &str) -> Option<Self> {
                match s { $(stringify!($variant) => Some($name::$variant),)+ _ => None }
            }
        }

        impl $crate::wire::codec::__utoipa::PartialSchema for $name {
            fn schema() -> $crate::wire::codec::__utoipa::openapi::RefOr<$crate::wire::codec::__utoipa::openapi::schema::Schema> {
                $crate::wire::codec::enum_schema(stringify!($name), &[$((stringify!($variant), $name::$variant as i64)),+])
            }
        }

        impl $crate::wire::codec::__utoipa::ToSchema for $name {
            fn name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(stringify!($name))
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result { f.write_str(self.name()) }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl ::serde::de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter) -> ::std::fmt::Result {
                        write!(f, "a {} name or number", stringify!($name))
                    }
                    fn visit_str<E: ::serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        $name::from_name(v).ok_or_else(|| E::custom(format!(
                            "unknown {} \"{}\" (expected one of {})", stringify!($name), v,
                            [$(stringify!($variant)),+].join(", "))))
                    }
                    fn visit_i64<E: ::serde::de::Error>(self, v: i64) -> Result<$name, E> {
                        $name::from_number(v).ok_or_else(|| E::custom(format!(
                            "unknown {} number {}", stringify!($name), v)))
                    }
                    fn visit_u64<E: ::serde::de::Error>(self, v: u64) -> Result<$name, E> {
                        self.visit_i64(i64::try_from(v).unwrap_or(-1))
                    }
                    fn visit_unit<E: ::serde::de::Error>(self) -> Result<$name, E> {
                        Ok($name::default())
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use regex::Regex;
    use serde::{Deserialize, Serialize};
    use utoipa::PartialSchema;

    #[derive(Serialize, Deserialize, Debug, PartialEq, Default, Clone)]
    struct T {
        #[serde(with = "super::int64", default)]
        a: i64,
        #[serde(with = "super::int64_vec", default)]
        v: Vec<i64>,
    }

    #[derive(Deserialize, Debug)]
    struct U {
        #[serde(with = "super::uint64")]
        #[allow(dead_code, reason = "only parsed")]
        a: u64,
    }

    fn int64_reads(s: &str) -> bool {
        serde_json::from_value::<T>(serde_json::json!({ "a": s })).is_ok()
    }

    fn uint64_reads(s: &str) -> bool {
        serde_json::from_value::<U>(serde_json::json!({ "a": s })).is_ok()
    }

    /// Numerals at and around the ends of the 64-bit ranges, and anywhere in between.
    fn numbers() -> impl Strategy<Value = i128> {
        prop_oneof![
            any::<i64>().prop_map(i128::from),
            any::<u64>().prop_map(i128::from),
            (-50i128..50).prop_map(|d| i64::MIN as i128 + d),
            (-50i128..50).prop_map(|d| i64::MAX as i128 + d),
            (-50i128..50).prop_map(|d| u64::MAX as i128 + d),
            (-50i128..50),
        ]
    }

    /// `n` written with an optional `+`, leading zeros, or a sign flip.
    fn spellings() -> impl Strategy<Value = String> {
        (numbers(), any::<bool>(), 0usize..3, any::<bool>()).prop_map(|(n, plus, zeros, minus)| {
            let digits = n.unsigned_abs().to_string();
            let sign = if n < 0 || (minus && n == 0) {
                "-"
            } else if plus {
                "+"
            } else {
                ""
            };
            format!("{sign}{}{digits}", "0".repeat(zeros))
        })
    }

    proptest! {
        #[test]
        fn int64_pattern_matches_exactly_the_strings_int64_reads(
            s in prop_oneof![spellings(), "[+-]{0,2}0{0,2}[0-9]{0,20}"]
        ) {
            let re = Regex::new(&super::int64_pattern()).unwrap();
            prop_assert_eq!(re.is_match(&s), int64_reads(&s), "{:?}", s);
        }

        #[test]
        fn uint64_pattern_matches_exactly_the_strings_uint64_reads(
            s in prop_oneof![spellings(), "[+-]{0,2}0{0,2}[0-9]{0,21}"]
        ) {
            let re = Regex::new(&super::uint64_pattern()).unwrap();
            prop_assert_eq!(re.is_match(&s), uint64_reads(&s), "{:?}", s);
        }
    }

    proptest! {
        #[test]
        fn any_int64_list_round_trips_through_strings_and_numbers(v in proptest::collection::vec(any::<i64>(), 0..64)) {
            let t = T { a: v.first().copied().unwrap_or(0), v: v.clone() };
            let text = serde_json::to_string(&t).unwrap();
            prop_assert_eq!(serde_json::from_str::<T>(&text).unwrap(), t.clone());
            let numbers = format!(
                r#"{{"a":{},"v":[{}]}}"#,
                t.a,
                v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
            );
            prop_assert_eq!(serde_json::from_str::<T>(&numbers).unwrap(), t);
        }

        #[test]
        fn arbitrary_json_never_panics_and_is_read_or_refused(text in "[\\[\\]{}\",:0-9a-z .eE+-]{0,64}") {
            // Whatever comes in, the codec answers Ok or Err: it never panics or loops.
            let _ = serde_json::from_str::<T>(&text);
            let _ = serde_json::from_str::<crate::wire::meta::GetCacheLocationRequest>(&text);
            let _ = serde_json::from_str::<crate::wire::RegisterInstanceRequest>(&text);
        }
    }

    #[test]
    fn int64_patterns_hold_the_ends_of_their_ranges() {
        let (int64, uint64) =
            (Regex::new(&super::int64_pattern()).unwrap(), Regex::new(&super::uint64_pattern()).unwrap());
        for s in ["-9223372036854775808", "9223372036854775807", "+0", "-0", "007"] {
            assert!(int64.is_match(s) && int64_reads(s), "{s}");
        }
        for s in ["-9223372036854775809", "9223372036854775808", "", "-", "1.0", "1e3", " 1"] {
            assert!(!int64.is_match(s), "{s}");
        }
        assert!(uint64.is_match("18446744073709551615") && !uint64.is_match("18446744073709551616"));
        assert!(!uint64.is_match("-1") && !uint64.is_match("-0"));
    }

    #[test]
    fn int64_fields_read_numbers_and_strings_and_write_strings() {
        let t: T = serde_json::from_str(r#"{"a":"-5","v":[1,"2",-9223372036854775808]}"#).unwrap();
        assert_eq!(t, T { a: -5, v: vec![1, 2, i64::MIN] });
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"a":"-5","v":["1","2","-9223372036854775808"]}"#);
    }

    #[test]
    fn int64_rejects_fractions_and_garbage_with_a_reason() {
        let e = serde_json::from_str::<T>(r#"{"a":1.5}"#).unwrap_err().to_string();
        assert!(e.contains("not an integer"), "{e}");
        let e = serde_json::from_str::<T>(r#"{"v":["x"]}"#).unwrap_err().to_string();
        assert!(e.contains("\"x\" is not a 64-bit integer"), "{e}");
        let e = serde_json::from_str::<T>(r#"{"a":18446744073709551615}"#).unwrap_err().to_string();
        assert!(e.contains("does not fit"), "{e}");
        // Floats: exact integers only (no silent rounding or clamping).
        assert_eq!(serde_json::from_str::<T>(r#"{"a":4.0e3}"#).unwrap().a, 4000);
        for inexact in ["-9223372036854775809", "9007199254740993.0", "9007199254740993e0", "1e19", "-1e300"] {
            let e = serde_json::from_str::<T>(&format!(r#"{{"a":{inexact}}}"#)).unwrap_err().to_string();
            assert!(e.contains("too large to be exact"), "{inexact}: {e}");
        }
    }

    crate::wire_enum! {
        pub enum Color { RED = 0, GREEN = 1, BLUE = 7 }
    }

    #[test]
    fn enum_tables_list_every_variant_with_its_number() {
        assert_eq!(Color::ALL.iter().map(|c| c.number()).collect::<Vec<_>>(), vec![0, 1, 7]);
    }

    #[test]
    fn enum_schemas_list_every_name_and_number() {
        let schema = serde_json::to_value(Color::schema()).unwrap();
        assert_eq!(schema["oneOf"][0]["enum"], serde_json::json!(["RED", "GREEN", "BLUE"]));
        assert_eq!(schema["oneOf"][1]["enum"], serde_json::json!([0, 1, 7]));
        assert_eq!(schema["oneOf"][2]["type"], "null");
    }

    #[test]
    fn enums_read_names_or_numbers_and_write_names() {
        let c: Vec<Color> = serde_json::from_str(r#"["GREEN", 7, 0]"#).unwrap();
        assert_eq!(c, vec![Color::GREEN, Color::BLUE, Color::RED]);
        assert_eq!(serde_json::to_string(&c).unwrap(), r#"["GREEN","BLUE","RED"]"#);
        let e = serde_json::from_str::<Color>(r#""PINK""#).unwrap_err().to_string();
        assert!(e.contains("unknown Color \"PINK\""), "{e}");
        assert!(serde_json::from_str::<Color>("3").is_err());
    }
}
