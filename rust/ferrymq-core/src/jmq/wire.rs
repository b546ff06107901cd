//! The [`Wire`] trait: how one field type is laid out in a JMQ4 payload, and the [`wire!`]
//! macro that states a payload's layout once, as the ordered list of its fields.
//!
//! A struct declared with `wire!` is written and read field by field in declaration order, each
//! field through its type's [`Wire`] implementation:
//!
//! | type | layout |
//! | --- | --- |
//! | `bool`, `u8`, `i8`, `i16`, `i32`, `i64`, `f64` | BOOLEAN, BYTE, SHORT, INT, LONG, DOUBLE (big-endian) |
//! | `String` | S2 (an absent string reads as empty) |
//! | `Option<String>` | S2 (a zero length reads as `None`) |
//! | `Vec<T>` | ARRAY: a SHORT count, then the items |
//! | `(A, B)`, `(A, B, C)` | the members one after the other |
//! | [`WireMessage`] | the MESSAGE store format, its length trusted |
//!
//! Layouts that are not a plain field list (S1 strings, version-dependent fields, presence
//! flags, sentinels, the COMMIT_ACK count bug) implement [`Wire`] or `Payload` by hand in
//! `command`, the module that uses this one.

use bytes::{BufMut, BytesMut};

use super::codec::{put_bool, put_count, put_s2, Reader};
use super::message::{WireMessage, FIXED_LEN};
use crate::error::Result;

/// A value with one layout on the wire.
pub trait Wire: Sized {
    /// The fewest bytes one value takes (bounds the capacity reserved for a decoded array).
    const MIN_LEN: usize;
    /// Append the value; `field` names it in errors, `version` is the request's header version.
    fn put(&self, d: &mut BytesMut, field: &'static str, version: u8) -> Result<()>;
    /// Read the value.
    fn get(r: &mut Reader, version: u8) -> Result<Self>;
}

macro_rules! number {
    ($($t:ty, $put:ident, $get:ident, $len:expr;)*) => {$(
        impl Wire for $t {
            const MIN_LEN: usize = $len;
            fn put(&self, d: &mut BytesMut, _: &'static str, _: u8) -> Result<()> {
                d.$put(*self);
                Ok(())
            }
            fn get(r: &mut Reader, _: u8) -> Result<Self> {
                r.$get()
            }
        }
    )*};
}

number! {
    u8, put_u8, u8, 1;
    i8, put_i8, i8, 1;
    i16, put_i16, i16, 2;
    i32, put_i32, i32, 4;
    i64, put_i64, i64, 8;
    f64, put_f64, f64, 8;
}

impl Wire for bool {
    const MIN_LEN: usize = 1;
    fn put(&self, d: &mut BytesMut, _: &'static str, _: u8) -> Result<()> {
        put_bool(d, *self);
        Ok(())
    }
    fn get(r: &mut Reader, _: u8) -> Result<Self> {
        r.bool()
    }
}

impl Wire for String {
    const MIN_LEN: usize = 2;
    fn put(&self, d: &mut BytesMut, field: &'static str, _: u8) -> Result<()> {
        put_s2(d, field, Some(self))
    }
    fn get(r: &mut Reader, _: u8) -> Result<Self> {
        r.s2_or_empty()
    }
}

impl Wire for Option<String> {
    const MIN_LEN: usize = 2;
    fn put(&self, d: &mut BytesMut, field: &'static str, _: u8) -> Result<()> {
        put_s2(d, field, self.as_deref())
    }
    fn get(r: &mut Reader, _: u8) -> Result<Self> {
        r.s2()
    }
}

impl<T: Wire> Wire for Vec<T> {
    const MIN_LEN: usize = 2;
    fn put(&self, d: &mut BytesMut, field: &'static str, version: u8) -> Result<()> {
        put_count(d, field, self.len())?;
        for item in self {
            item.put(d, field, version)?;
        }
        Ok(())
    }
    fn get(r: &mut Reader, version: u8) -> Result<Self> {
        let n = r.count()?;
        let mut v = Vec::with_capacity(n.min(r.remaining() / T::MIN_LEN.max(1)));
        for _ in 0..n {
            v.push(T::get(r, version)?);
        }
        Ok(v)
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    const MIN_LEN: usize = A::MIN_LEN + B::MIN_LEN;
    fn put(&self, d: &mut BytesMut, field: &'static str, version: u8) -> Result<()> {
        self.0.put(d, field, version)?;
        self.1.put(d, field, version)
    }
    fn get(r: &mut Reader, version: u8) -> Result<Self> {
        Ok((A::get(r, version)?, B::get(r, version)?))
    }
}

impl<A: Wire, B: Wire, C: Wire> Wire for (A, B, C) {
    const MIN_LEN: usize = A::MIN_LEN + B::MIN_LEN + C::MIN_LEN;
    fn put(&self, d: &mut BytesMut, field: &'static str, version: u8) -> Result<()> {
        self.0.put(d, field, version)?;
        self.1.put(d, field, version)?;
        self.2.put(d, field, version)
    }
    fn get(r: &mut Reader, version: u8) -> Result<Self> {
        Ok((
            A::get(r, version)?,
            B::get(r, version)?,
            C::get(r, version)?,
        ))
    }
}

impl Wire for WireMessage {
    const MIN_LEN: usize = FIXED_LEN;
    fn put(&self, d: &mut BytesMut, _: &'static str, _: u8) -> Result<()> {
        self.encode(d)
    }
    fn get(r: &mut Reader, _: u8) -> Result<Self> {
        WireMessage::decode(r, true)
    }
}

/// Declare a struct whose wire layout is its fields in order, and implement [`Wire`] for it.
/// With `[TYPE]` after the name it is also a `Payload` of that command type, and with
/// `[TYPE => Response]` a `Request` answered by `Response` (both traits as named where the macro
/// is used).
macro_rules! wire {
    (
        $(#[$m:meta])*
        pub struct $name:ident $([$ty:expr $(=> $resp:ty)?])? {
            $($(#[$fm:meta])* pub $f:ident: $ft:ty,)*
        }
    ) => {
        $(#[$m])*
        pub struct $name {
            $($(#[$fm])* pub $f: $ft,)*
        }
        impl $crate::jmq::wire::Wire for $name {
            const MIN_LEN: usize = 0 $(+ <$ft as $crate::jmq::wire::Wire>::MIN_LEN)*;
            #[allow(unused_variables)]
            fn put(
                &self,
                d: &mut ::bytes::BytesMut,
                _: &'static str,
                version: u8,
            ) -> $crate::error::Result<()> {
                $($crate::jmq::wire::Wire::put(&self.$f, d, stringify!($f), version)?;)*
                Ok(())
            }
            #[allow(unused_variables)]
            fn get(
                r: &mut $crate::jmq::codec::Reader,
                version: u8,
            ) -> $crate::error::Result<Self> {
                Ok($name {
                    $($f: <$ft as $crate::jmq::wire::Wire>::get(r, version)?,)*
                })
            }
        }
        $(
            impl Payload for $name {
                const TYPE: i8 = $ty;
                fn encode(&self, version: u8, d: &mut ::bytes::BytesMut) -> $crate::error::Result<()> {
                    $crate::jmq::wire::Wire::put(self, d, stringify!($name), version)
                }
                fn decode(r: &mut $crate::jmq::codec::Reader, version: u8) -> $crate::error::Result<Self> {
                    <Self as $crate::jmq::wire::Wire>::get(r, version)
                }
            }
            $(
                impl Request for $name {
                    type Response = $resp;
                }
            )?
        )?
    };
}

pub(crate) use wire;
