//! A deserializer adapter that reads every struct as a map, at every depth, so that a struct's
//! `#[serde(deny_unknown_fields)]` sees each key the input has.
//!
//! Why: some deserializers read a struct by looking up only its declared field names. `serde_wasm_bindgen`
//! (0.6) does that for a JS object, so `{model, messages, temprature: 1}` would deserialize with the
//! misspelt field silently dropped, where kiln must refuse it (422 `unknown_parameter`). Asking the inner
//! deserializer for a map instead makes it hand over every entry; the derived struct visitors accept a map
//! (`visit_map`), so nothing else changes. `serde_json` already reads structs as maps, so over it the
//! adapter is a no-op (tested below).
//!
//! The adapter wraps whatever the inner deserializer hands back (visitors, `SeqAccess`, `MapAccess`,
//! `EnumAccess`, seeds), so nested structs are read as maps too. It composes with
//! [`serde_path_to_error`], which goes outside it.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// `D`, with structs read as maps (see the module docs).
pub struct StructsAsMaps<D>(pub D);

/// One wrapper for everything the inner deserializer hands to, or back from, a visitor: each trait is
/// implemented for `Wrap<X>` when `X` implements it, re-wrapping what goes deeper.
struct Wrap<X>(X);

macro_rules! forward_deserialize {
    ($($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.0.$method(Wrap(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for StructsAsMaps<D> {
    type Error = D::Error;

    forward_deserialize!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_map(Wrap(visitor))
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, Wrap(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_newtype_struct(name, Wrap(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple(len, Wrap(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple_struct(name, len, Wrap(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, Wrap(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),* $(,)?) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.0.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.visit_some(StructsAsMaps(d))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.visit_newtype_struct(StructsAsMaps(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.visit_seq(Wrap(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(Wrap(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.0.visit_enum(Wrap(data))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Wrap<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(StructsAsMaps(d))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Wrap(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Wrap(seed))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(Wrap(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<A> {
    type Error = A::Error;
    type Variant = Wrap<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, Self::Variant), A::Error> {
        self.0
            .variant_seed(Wrap(seed))
            .map(|(value, variant)| (value, Wrap(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Wrap(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrap(visitor))
    }

    /// A struct variant's fields: `VariantAccess` has no map form, so these are read the inner way (kiln's
    /// request types use internally tagged or untagged enums, which are read through `deserialize_any`).
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Wrap(visitor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde::de::value::MapDeserializer;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: u32,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        inner: Option<Vec<Inner>>,
        #[serde(default)]
        name: String,
    }

    /// A deserializer that reads structs the way `serde_wasm_bindgen` does: only the declared fields,
    /// looked up one by one, the rest never seen.
    struct DeclaredOnly(serde_json::Value);

    impl<'de> Deserializer<'de> for DeclaredOnly {
        type Error = serde_json::Error;

        fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
            self.0.deserialize_any(v)
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            let serde_json::Value::Object(map) = self.0 else {
                return Err(de::Error::custom("not an object"));
            };
            let declared = fields
                .iter()
                .filter_map(|f| map.get(*f).map(|v| (*f, DeclaredOnly(v.clone()))));
            visitor.visit_map(MapDeserializer::new(declared))
        }

        fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
            match self.0 {
                serde_json::Value::Null => v.visit_none(),
                other => v.visit_some(DeclaredOnly(other)),
            }
        }

        fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
            let serde_json::Value::Array(items) = self.0 else {
                return Err(de::Error::custom("not an array"));
            };
            v.visit_seq(de::value::SeqDeserializer::new(
                items.into_iter().map(DeclaredOnly),
            ))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
            unit_struct newtype_struct tuple tuple_struct map enum identifier ignored_any
        }
    }

    impl<'de> de::IntoDeserializer<'de, serde_json::Error> for DeclaredOnly {
        type Deserializer = Self;
        fn into_deserializer(self) -> Self {
            self
        }
    }

    #[test]
    fn unknown_fields_are_seen_at_every_depth_through_a_declared_fields_deserializer() {
        let nested = json!({"inner": [{"a": 1}, {"a": 2, "b": 3}]});
        // The inner deserializer alone drops the unknown `b`: the bug this adapter exists for.
        assert!(Outer::deserialize(DeclaredOnly(nested.clone())).is_ok());
        let e = Outer::deserialize(StructsAsMaps(DeclaredOnly(nested))).unwrap_err();
        assert!(e.to_string().starts_with("unknown field `b`"), "{e}");
        let top = json!({"inner": null, "nmae": "x"});
        let e = Outer::deserialize(StructsAsMaps(DeclaredOnly(top))).unwrap_err();
        assert!(e.to_string().starts_with("unknown field `nmae`"), "{e}");
        let good = json!({"inner": [{"a": 7}], "name": "n"});
        assert_eq!(
            Outer::deserialize(StructsAsMaps(DeclaredOnly(good))).unwrap(),
            Outer {
                inner: Some(vec![Inner { a: 7 }]),
                name: "n".into()
            }
        );
    }

    #[test]
    fn over_serde_json_the_adapter_changes_nothing_and_paths_still_resolve() {
        let body = json!({"inner": [{"a": 1}, {"a": "two"}]});
        let plain = serde_path_to_error::deserialize::<_, Outer>(body.clone()).unwrap_err();
        let wrapped = serde_path_to_error::deserialize::<_, Outer>(StructsAsMaps(body)).unwrap_err();
        assert_eq!(wrapped.path().to_string(), "inner[1].a");
        assert_eq!(plain.path().to_string(), wrapped.path().to_string());
        assert_eq!(plain.inner().to_string(), wrapped.inner().to_string());
    }
}
