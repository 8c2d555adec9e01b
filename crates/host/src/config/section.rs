//! The machinery behind the section types: the [`section!`] macro declares a
//! section's struct once — each key's field, type, default, rule and doc —
//! and derives from that declaration everything else: `Default`, serde
//! (strict: an unknown key is an error, every value is checked by its rule
//! inside the deserializer so `serde_path_to_error` names the key), reading
//! back a value as TOML, setting one from a flag, anchoring relative paths,
//! and the per-key metadata the reference and `toolcell config` print.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::Deserialize as _;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use toml::Value;

use super::rules::{Kind, expected_got};

/// One key of a section, as its declaration gives it.
#[derive(Debug)]
pub(crate) struct KeyMeta {
    pub(crate) name: &'static str,
    pub(crate) doc: &'static str,
    pub(crate) kind: Kind,
    pub(crate) accepts: String,
}

/// What [`section!`] implements for each section type.
pub(crate) trait Section: Default + Sized {
    /// The keys, in declaration (and printing) order.
    const KEYS: &'static [&'static str];
    /// The section's doc comment.
    const DOC: &'static str;
    /// Every key's metadata, in declaration order.
    fn meta() -> Vec<KeyMeta>;
    /// `key`'s value as TOML; `None` for an unknown key.
    fn get(&self, key: &str) -> Option<Value>;
    /// Checks and stores `value`; `None` for an unknown key, `Some(Err)`
    /// with what the key accepts when the value is refused.
    fn set(&mut self, key: &str, value: &Value) -> Option<Result<(), String>>;
    /// Anchors relative paths at `base` (the config file's directory).
    fn anchor(&mut self, base: &Path);
}

/// Declares a section: `pub struct Name { /// doc \n key: Type = default, rule; … }`.
macro_rules! section {
    (
        $(#[doc = $sdoc:literal])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident: $ty:ty = $default:expr, $rule:expr;
            )+
        }
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Clone, Debug, PartialEq)]
        #[non_exhaustive]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                pub $field: $ty,
            )+
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $( $field: $default, )+
                }
            }
        }

        impl $crate::config::section::Section for $name {
            const KEYS: &'static [&'static str] = &[$(stringify!($field)),+];
            const DOC: &'static str = concat!($($sdoc, "\n"),*);

            fn meta() -> Vec<$crate::config::section::KeyMeta> {
                vec![$(
                    $crate::config::section::KeyMeta {
                        name: stringify!($field),
                        doc: concat!($($doc, "\n"),*),
                        kind: $crate::config::rules::Rule::<$ty>::kind(&$rule),
                        accepts: $crate::config::rules::Rule::<$ty>::accepts(&$rule),
                    },
                )+]
            }

            fn get(&self, key: &str) -> Option<toml::Value> {
                match key {
                    $( stringify!($field) => {
                        Some($crate::config::rules::Rule::<$ty>::to_value(&$rule, &self.$field))
                    } )+
                    _ => None,
                }
            }

            fn set(&mut self, key: &str, value: &toml::Value) -> Option<Result<(), String>> {
                match key {
                    $( stringify!($field) => Some(
                        $crate::config::rules::Rule::<$ty>::parse(&$rule, value)
                            .map(|v| self.$field = v),
                    ), )+
                    _ => None,
                }
            }

            fn anchor(&mut self, base: &std::path::Path) {
                $( $crate::config::rules::Rule::<$ty>::anchor(&$rule, &mut self.$field, base); )+
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                $crate::config::section::serialize(self, s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::config::section::deserialize(d)
            }
        }
    };
}

pub(crate) use section;

/// Serializes a section as a map of its keys' TOML values.
pub(crate) fn serialize<T: Section, S: serde::Serializer>(
    section: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap as _;
    let mut map = s.serialize_map(Some(T::KEYS.len()))?;
    for key in T::KEYS {
        if let Some(value) = section.get(key) {
            map.serialize_entry(key, &value)?;
        }
    }
    map.end()
}

/// Deserializes a section strictly: the defaults, then each key given,
/// checked by its rule; an unknown key is an error.
pub(crate) fn deserialize<'de, T: Section, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(SectionVisitor::<T>(PhantomData))
}

struct SectionVisitor<T>(PhantomData<T>);

impl<'de, T: Section> Visitor<'de> for SectionVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a table with the keys {}", T::KEYS.join(", "))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut section = T::default();
        while let Some(key) = map.next_key::<String>()? {
            if !T::KEYS.contains(&key.as_str()) {
                return Err(de::Error::unknown_field(&key, T::KEYS));
            }
            // Checked inside the value's deserializer, so an error carries
            // the key in its path.
            map.next_value_seed(Checked {
                section: &mut section,
                key: &key,
            })?;
        }
        Ok(section)
    }
}

struct Checked<'a, T> {
    section: &'a mut T,
    key: &'a str,
}

impl<'de, T: Section> DeserializeSeed<'de> for Checked<'_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let value = Value::deserialize(d)?;
        match self.section.set(self.key, &value) {
            Some(Ok(())) => Ok(()),
            Some(Err(expected)) => Err(de::Error::custom(expected_got(&expected, &value))),
            None => Err(de::Error::unknown_field(self.key, T::KEYS)),
        }
    }
}
