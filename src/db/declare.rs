//! One declaration per group of statements: [`statements!`] writes, from one list of
//! names, value types and files, the group's rendered type (a `Statement` per name),
//! its templates (a text per name, by name, never by position) for each server that
//! has the group, and the rendering of the one into the other. Nothing is listed twice,
//! so a statement is added in one place: its line here and its files in `sql/`.

/// Declares a group of statements.
///
/// ```text
/// statements! {
///     /// The group's documentation.
///     Group / GroupTemplates for { postgres: "postgres", mysql: "mysql" } {
///         /// A statement: its values and its file (`sql/<server>/rw_gate.sql`).
///         gate: Key<'static> = "rw_gate",
///     }
///     groups { other: Other / OtherTemplates }
/// }
/// ```
///
/// gives `struct Group { gate: Statement<Key<'static>>, other: Other }`, `struct
/// GroupTemplates { gate: &'static str, other: OtherTemplates }` with a constructor per
/// server listed (`GroupTemplates::postgres()`, compiled with that server's feature),
/// and `Group::render(&templates, &target)`. The `groups` part is optional: groups
/// nested in this one, declared by their own `statements!`, for the same servers.
macro_rules! statements {
    // Each server's constructor, with the group's files and nested groups as one token
    // tree each, so that no repetition runs inside another.
    (@servers $fields:tt $groups:tt $( $server:ident : $dir:literal ),+) => {
        $( $crate::db::declare::statements!(@server $server $dir $fields $groups); )+
    };
    // One server's constructor of a group's templates: its files, and its nested
    // groups' constructors of the same server.
    (@server $server:ident $dir:literal
        [ $( $field:ident = $file:literal ),* ]
        [ $( $group:ident : $gtemplates:ident ),* ]
    ) => {
        #[doc = concat!("The files of `sql/", $dir, "/`.")]
        #[cfg(any(feature = $dir, test))]
        pub(crate) fn $server() -> Self {
            Self {
                $( $field: $crate::db::backend::sql!($dir, $file), )*
                $( $group: $gtemplates::$server(), )*
            }
        }
    };
    (
        $(#[$meta:meta])*
        $name:ident / $templates:ident for { $($server:ident : $dir:literal),+ $(,)? } {
            $( $(#[$fmeta:meta])* $field:ident : $values:ty = $file:literal ),* $(,)?
        }
        $( groups { $( $(#[$gmeta:meta])* $group:ident : $gname:ident / $gtemplates:ident ),* $(,)? } )?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub(crate) struct $name {
            $( $(#[$fmeta])* pub(crate) $field: $crate::db::statement::Statement<$values>, )*
            $($( $(#[$gmeta])* pub(crate) $group: $gname, )*)?
        }

        #[doc = concat!("The templates of [`", stringify!($name), "`], by name, as a server's ")]
        #[doc = "folder in `sql/` has them; one constructor per server."]
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct $templates {
            $( pub(crate) $field: &'static str, )*
            $($( pub(crate) $group: $gtemplates, )*)?
        }

        impl $templates {
            $crate::db::declare::statements!(
                @servers
                [ $( $field = $file ),* ]
                [ $($( $group : $gtemplates ),*)? ]
                $( $server : $dir ),+
            );
        }

        impl $name {
            /// The group rendered for `target`'s table and dialect.
            pub(crate) fn render(t: &$templates, target: &$crate::db::statement::Target<'_>) -> Self {
                Self {
                    $( $field: target.render(t.$field), )*
                    $($( $group: $gname::render(&t.$group, target), )*)?
                }
            }
        }
    };
}
pub(crate) use statements;
