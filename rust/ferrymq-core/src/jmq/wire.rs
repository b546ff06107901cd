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
//! A field may name another [`Layout`] (S1 strings, presence flags, and the one-off layouts
//! `command` states next to their types: sentinels, the COMMIT_ACK count bug) or be on the wire
//! from a header version on only.

use bytes::{BufMut, BytesMut};

use super::codec::{put_bool, put_count, put_s1, put_s2, Reader};
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

/// A layout other than a type's own [`Wire`] one, chosen for a field with `[as Layout]` in
/// [`wire!`]: S1 strings, presence flags, and the few one-off layouts `command` states.
pub trait Layout<T> {
    /// The fewest bytes one value takes.
    const MIN_LEN: usize;
    /// Append `x`; `field` names it in errors, `version` is the request's header version.
    fn put(x: &T, d: &mut BytesMut, field: &'static str, version: u8) -> Result<()>;
    /// Read a value.
    fn get(r: &mut Reader, version: u8) -> Result<T>;
}

/// S1: a BYTE length, then UTF-8 (an absent string reads as `None`, or as empty for `String`).
pub struct S1;

impl Layout<Option<String>> for S1 {
    const MIN_LEN: usize = 1;
    fn put(x: &Option<String>, d: &mut BytesMut, field: &'static str, _: u8) -> Result<()> {
        put_s1(d, field, x.as_deref())
    }
    fn get(r: &mut Reader, _: u8) -> Result<Option<String>> {
        r.s1()
    }
}

impl Layout<String> for S1 {
    const MIN_LEN: usize = 1;
    fn put(x: &String, d: &mut BytesMut, field: &'static str, _: u8) -> Result<()> {
        put_s1(d, field, Some(x))
    }
    fn get(r: &mut Reader, _: u8) -> Result<String> {
        Ok(r.s1()?.unwrap_or_default())
    }
}

/// A BOOLEAN presence flag, then the value when present.
pub struct Present;

impl<T: Wire> Layout<Option<T>> for Present {
    const MIN_LEN: usize = 1;
    fn put(x: &Option<T>, d: &mut BytesMut, field: &'static str, version: u8) -> Result<()> {
        put_bool(d, x.is_some());
        match x {
            Some(x) => x.put(d, field, version),
            None => Ok(()),
        }
    }
    fn get(r: &mut Reader, version: u8) -> Result<Option<T>> {
        if r.bool()? {
            Ok(Some(T::get(r, version)?))
        } else {
            Ok(None)
        }
    }
}

/// Declare a struct whose wire layout is its fields in order, and implement [`Wire`] for it.
/// With `[TYPE]` after the name it is also a `Payload` of that command type, and with
/// `[TYPE => Response]` a `Request` answered by `Response` (both traits as named where the macro
/// is used). One `const` generic parameter is allowed (a payload shared by two command types).
///
/// A field is laid out by its type's [`Wire`] implementation unless its type is followed by
/// `[as L]` (the [`Layout`] `L`) or `[since N, else D]` (on the wire from header version `N`
/// on; read as `D` before).
macro_rules! wire {
    (
        $(#[$m:meta])*
        pub struct $name:ident $(<const $g:ident: $gt:ty>)? $([$ty:expr $(=> $resp:ty)?])? {
            $($(#[$fm:meta])* pub $f:ident: $ft:ty $([$($how:tt)+])?,)*
        }
    ) => {
        $(#[$m])*
        pub struct $name $(<const $g: $gt>)? {
            $($(#[$fm])* pub $f: $ft,)*
        }
        impl $(<const $g: $gt>)? $crate::jmq::wire::Wire for $name $(<$g>)? {
            const MIN_LEN: usize = 0 $(+ $crate::jmq::wire::field!(min $ft; $($($how)+)?))*;
            #[allow(unused_variables)]
            fn put(
                &self,
                d: &mut ::bytes::BytesMut,
                _: &'static str,
                version: u8,
            ) -> $crate::error::Result<()> {
                $($crate::jmq::wire::field!(
                    put &self.$f, d, stringify!($f), version, $ft; $($($how)+)?
                )?;)*
                Ok(())
            }
            #[allow(unused_variables)]
            fn get(
                r: &mut $crate::jmq::codec::Reader,
                version: u8,
            ) -> $crate::error::Result<Self> {
                Ok(Self {
                    $($f: $crate::jmq::wire::field!(get r, version, $ft; $($($how)+)?)?,)*
                })
            }
        }
        $crate::jmq::wire::wire!(
            @payload [$(const $g: $gt)?] [$($g)?] $name $([$ty $(=> $resp)?])?
        );
    };
    (@payload [$($gen:tt)*] [$($arg:tt)*] $name:ident) => {};
    (@payload [$($gen:tt)*] [$($arg:tt)*] $name:ident [$ty:expr $(=> $resp:ty)?]) => {
        impl<$($gen)*> Payload for $name<$($arg)*> {
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
    };
}

/// One field of a [`wire!`] struct: its minimum length, writing it, reading it.
macro_rules! field {
    (min $ft:ty;) => {
        <$ft as $crate::jmq::wire::Wire>::MIN_LEN
    };
    (min $ft:ty; as $l:ty) => {
        <$l as $crate::jmq::wire::Layout<$ft>>::MIN_LEN
    };
    (min $ft:ty; since $n:literal, else $def:expr) => {
        0
    };
    (put $x:expr, $d:ident, $f:expr, $v:ident, $ft:ty;) => {
        $crate::jmq::wire::Wire::put($x, $d, $f, $v)
    };
    (put $x:expr, $d:ident, $f:expr, $v:ident, $ft:ty; as $l:ty) => {
        <$l as $crate::jmq::wire::Layout<$ft>>::put($x, $d, $f, $v)
    };
    (put $x:expr, $d:ident, $f:expr, $v:ident, $ft:ty; since $n:literal, else $def:expr) => {
        if $v >= $n {
            $crate::jmq::wire::Wire::put($x, $d, $f, $v)
        } else {
            Ok(())
        }
    };
    (get $r:ident, $v:ident, $ft:ty;) => {
        <$ft as $crate::jmq::wire::Wire>::get($r, $v)
    };
    (get $r:ident, $v:ident, $ft:ty; as $l:ty) => {
        <$l as $crate::jmq::wire::Layout<$ft>>::get($r, $v)
    };
    (get $r:ident, $v:ident, $ft:ty; since $n:literal, else $def:expr) => {
        if $v >= $n {
            <$ft as $crate::jmq::wire::Wire>::get($r, $v)
        } else {
            Ok($def)
        }
    };
}

pub(crate) use {field, wire};
