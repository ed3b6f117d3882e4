//! The one place where the servers are told apart: a `match` over an enum with one
//! variant per server, each behind the feature that brings it.

/// Runs `$body` with `$x` bound to the value inside whichever server's variant of the
/// enum `$ty` `$value` is; the variants are named with the feature that brings each.
macro_rules! per_server {
    ($value:expr, $ty:ident { $($variant:ident: $feature:literal),* },
     |ref mut $x:ident| $body:expr) => {
        match $value {
            $(
                #[cfg(feature = $feature)]
                $ty::$variant(ref mut $x) => $body,
            )*
        }
    };
    ($value:expr, $ty:ident { $($variant:ident: $feature:literal),* }, |$x:ident| $body:expr) => {
        match $value {
            $(
                #[cfg(feature = $feature)]
                $ty::$variant($x) => $body,
            )*
        }
    };
}
pub(crate) use per_server;

/// Every server's variant, for [`per_server!`] over the enums with one variant per
/// server (`DbPool`, `Db`).
macro_rules! every_server {
    ($value:expr, $ty:ident, |$x:ident| $body:expr) => {
        $crate::db::per_server!(
            $value,
            $ty {
                Postgres: "postgres",
                MySql: "mysql",
                Sqlite: "sqlite"
            },
            |$x| $body
        )
    };
}
pub(crate) use every_server;
