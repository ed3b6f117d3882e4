//! The typed requests statements are bound with: each kind of statement takes the
//! values it needs, by name, and nothing else.

use crate::support::strategy_kind::Strategy;

use super::statement::{json_array, Param, Value, Values};

/// Declares kinds of values, each from one list of fields: its struct (every field
/// `pub(crate)`), and its [`Values`] with the parameter each field answers for
/// (`= Param`), or the parameters a field of another kind answers for in its place
/// (`as [Param, ...]`), in the order the list gives.
///
/// ```text
/// values! {
///     /// A grant extended to `ttl_us` from now.
///     Extend<'a> {
///         held: Held<'a> as [Key, Owner, Token],
///         ttl_us: i64 = TtlUs,
///     }
/// }
/// ```
macro_rules! values {
    ($(
        $(#[$meta:meta])*
        $name:ident<'a> {
            $( $field:ident : $ty:ty $(= $param:ident)? $(as [$($inner:ident),+ $(,)?])? ),+ $(,)?
        }
    )+) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct $name<'a> {
            $( pub(crate) $field: $ty, )+
        }

        impl Values for $name<'_> {
            type With<'b> = $name<'b>;

            const PARAMS: &'static [Param] = &[
                $( $(Param::$param,)? $($(Param::$inner,)+)? )+
            ];

            fn value(&self, param: Param) -> Value<'_> {
                match param {
                    $(
                        $( Param::$param => Bind::bind(&self.$field), )?
                        $( $(Param::$inner)|+ => self.$field.value(param), )?
                    )+
                    // Never asked: a statement names only the parameters of its kind
                    // (checked as it is rendered).
                    _ => Value::Int(0),
                }
            }
        }
    )+};
}

/// A field's value as a statement binds it.
trait Bind {
    fn bind(&self) -> Value<'_>;
}

impl Bind for &str {
    fn bind(&self) -> Value<'_> {
        Value::Text(self)
    }
}

impl Bind for i64 {
    fn bind(&self) -> Value<'_> {
        Value::Int(*self)
    }
}

/// A key alone: a lookup, a force release, the for-update strategy's row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Key<'a>(pub(crate) &'a str);

impl Values for Key<'_> {
    type With<'a> = Key<'a>;

    const PARAMS: &'static [Param] = &[Param::Key];

    fn value(&self, _: Param) -> Value<'_> {
        Value::Text(self.0)
    }
}

/// No value at all: the statements that read what a server offers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Nothing;

impl Values for Nothing {
    type With<'a> = Nothing;

    const PARAMS: &'static [Param] = &[];

    fn value(&self, _: Param) -> Value<'_> {
        Value::Int(0)
    }
}

/// A multi-lock's acquisition of every key of `keys` (distinct, sorted) by `owner`,
/// for `ttl_us` each, recorded as `strategy`; `presence` as for [`Acquire`]. Bound as
/// one statement, `:keys` is `keys` as a JSON array of strings.
#[derive(Debug, Clone)]
pub(crate) struct AcquireAll<'a> {
    pub(crate) keys: &'a [String],
    pub(crate) owner: &'a str,
    pub(crate) strategy: Strategy,
    pub(crate) ttl_us: i64,
    pub(crate) presence: &'a str,
    /// `keys` as a JSON array, made once by [`AcquireAll::new`].
    json: String,
}

impl<'a> AcquireAll<'a> {
    pub(crate) fn new(
        keys: &'a [String],
        owner: &'a str,
        strategy: Strategy,
        ttl_us: i64,
        presence: &'a str,
    ) -> Self {
        Self {
            keys,
            owner,
            strategy,
            ttl_us,
            presence,
            json: json_array(keys),
        }
    }
}

impl Values for AcquireAll<'_> {
    type With<'a> = AcquireAll<'a>;

    const PARAMS: &'static [Param] = &[
        Param::Keys,
        Param::Owner,
        Param::Strategy,
        Param::TtlUs,
        Param::Presence,
    ];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Owner => Value::Text(self.owner),
            Param::Strategy => Value::Text(self.strategy.name()),
            Param::TtlUs => Value::Int(self.ttl_us),
            Param::Presence => Value::Text(self.presence),
            _ => Value::Text(&self.json),
        }
    }
}

impl<'a> Parent<'a> {
    /// The name the hold `key` holds in shared mode, if it is such a hold.
    pub(crate) fn of(key: &'a str) -> Option<Self> {
        crate::support::validate::parent_of(key).map(|(name, kind)| Self {
            key: name,
            kind: kind.name(),
        })
    }
}

/// Keys, bound as one JSON array of strings (`:keys`).
#[derive(Debug, Clone)]
pub(crate) struct KeyList(String);

impl KeyList {
    pub(crate) fn new(keys: &[String]) -> Self {
        Self(json_array(keys))
    }
}

impl Values for KeyList {
    type With<'a> = KeyList;

    const PARAMS: &'static [Param] = &[Param::Keys];

    fn value(&self, _: Param) -> Value<'_> {
        Value::Text(&self.0)
    }
}

/// A presence marker: its key on PostgreSQL, its name on MariaDB.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marker<'a>(pub(crate) &'a str);

impl Values for Marker<'_> {
    type With<'a> = Marker<'a>;

    const PARAMS: &'static [Param] = &[Param::Presence];

    fn value(&self, _: Param) -> Value<'_> {
        Value::Text(self.0)
    }
}

/// At most `0` rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit(pub(crate) i64);

impl Values for Limit {
    type With<'a> = Limit;

    const PARAMS: &'static [Param] = &[Param::Limit];

    fn value(&self, _: Param) -> Value<'_> {
        Value::Int(self.0)
    }
}

values! {
    /// An acquisition of `key` by `owner`, for `ttl_us`, recorded as `strategy` (a
    /// strategy's name, or `write` for the write side of a read-write lock).
    ///
    /// `presence`: the key of the owner's presence marker to record with the lease (`""`
    /// for none); `gone`: an owner whose marker the caller found free and holds (SQLite;
    /// `""` for none), whose live lease may be taken.
    Acquire<'a> {
        key: &'a str = Key,
        owner: &'a str = Owner,
        strategy: &'a str = Strategy,
        ttl_us: i64 = TtlUs,
        presence: &'a str = Presence,
        gone: &'a str = Gone,
    }

    /// A name held in shared mode, as a hold of it takes, pushes or marks it: the name
    /// `key`, the owner of the hold, how many holds it adds (`count`), and how long from
    /// now it must last at least (`ttl_us`).
    Share<'a> {
        key: &'a str = Key,
        owner: &'a str = Owner,
        count: i64 = Count,
        ttl_us: i64 = TtlUs,
    }

    /// A name held in shared mode pushed to expire no sooner than one of its holds: the
    /// name `key`, the hold's key `hold` and owner `owner`.
    Push<'a> {
        key: &'a str = Key,
        hold: &'a str = Hold,
        owner: &'a str = Owner,
    }

    /// The name a hold in shared mode holds, and the mode (`read` or `semaphore`, the
    /// name's row's `lock_strategy` while so held), as
    /// [`parent_of`](crate::support::validate::parent_of) tells them from the hold's key.
    Parent<'a> {
        key: &'a str = Key,
        kind: &'a str = Strategy,
    }

    /// One grant, as the statements that act on it name it: its key, owner and token.
    Held<'a> {
        key: &'a str = Key,
        owner: &'a str = Owner,
        token: i64 = Token,
    }

    /// The release of a grant taken with an at-least hold: the row is kept until
    /// `at_least_us` after it was taken.
    Release<'a> {
        held: Held<'a> as [Key, Owner, Token],
        at_least_us: i64 = AtLeastUs,
    }

    /// A waiter's place in the fair strategy's queue: its key, owner and ticket (0
    /// before it has one), and the TTL its place lasts for unless renewed.
    ///
    /// `presence`: the key of the waiter's presence marker, which its place records as
    /// it joins and a grant as the waiter takes it up (`""` for none); `gone`: a JSON
    /// array of owners whose markers the caller found free and holds (SQLite; `"[]"`
    /// for none), whose live lock a handoff may take.
    Place<'a> {
        key: &'a str = Key,
        owner: &'a str = Owner,
        ticket: i64 = Ticket,
        ttl_us: i64 = TtlUs,
        presence: &'a str = Presence,
        gone: &'a str = Gone,
    }

    /// A held lock's presence marker to record: the key of `presence` (never `""`), in
    /// the grant `held` names.
    Present<'a> {
        held: Held<'a> as [Key, Owner, Token],
        presence: &'a str = Presence,
    }

    /// A quorum lock's token raised to `quorum` where the grant `held` names is still
    /// the holder's.
    Raise<'a> {
        held: Held<'a> as [Key, Owner, Token],
        quorum: i64 = Quorum,
    }

    /// An election's claim: `identity` recorded as the leader of the grant's term.
    Claim<'a> {
        held: Held<'a> as [Key, Owner, Token],
        identity: &'a str = Identity,
    }

    /// A grant handed to the waiter of `ticket` on `key`, with its fencing token.
    Mark<'a> {
        key: &'a str = Key,
        ticket: i64 = Ticket,
        token: i64 = Token,
    }

    /// An extension of a grant to at least `ttl_us` from now.
    Extend<'a> {
        held: Held<'a> as [Key, Owner, Token],
        ttl_us: i64 = TtlUs,
    }

    /// A batched renewal of `owner`'s leases of one TTL: `batch` is the JSON array of
    /// `[key, token]` pairs, `[key, token, name]` for a hold of a name in shared mode (see
    /// [`batch_json`](super::statement::batch_json)).
    Renew<'a> {
        owner: &'a str = Owner,
        ttl_us: i64 = TtlUs,
        batch: &'a str = Batch,
    }

    /// One batch of the sweep: rows expired for longer than `grace_us`, `limit` at most;
    /// `claimed` is the JSON array of the keys a first step claimed (MariaDB).
    Sweep<'a> {
        grace_us: i64 = GraceUs,
        limit: i64 = Limit,
        claimed: &'a str = Batch,
    }

    /// The for-update strategy's bound on its row lock wait (PostgreSQL's `lock_timeout`)
    /// and the key's gate.
    Bound<'a> {
        key: &'a str = Key,
        wait_us: i64 = WaitUs,
    }

    /// A wait in the server, for `wait_us` at most, for another handle's presence
    /// marker `presence` to be freed (`marker_wait.sql`).
    MarkerWait<'a> {
        presence: &'a str = Presence,
        wait_us: i64 = WaitUs,
    }

    /// A key's wake lock (`wake_hold.sql`, `wake_free.sql`), by its name `wake`: the
    /// table and the key.
    WakeName<'a> {
        wake: &'a str = Wake,
    }

    /// A wait in the server, for `wait_us` at most, for the wake lock named `wake` to be
    /// let go by the key's holder (`wake_wait.sql`).
    WakeWait<'a> {
        wake: &'a str = Wake,
        wait_us: i64 = WaitUs,
    }

    /// The for-update strategy's grant to `owner`, putting back `setting` (the
    /// `lock_timeout` its bound replaced, on PostgreSQL).
    RowGrant<'a> {
        key: &'a str = Key,
        owner: &'a str = Owner,
        setting: &'a str = Setting,
    }

    /// A sweep scheduled inside the database: a pg_cron `schedule`, or an event every
    /// `every_s` seconds, of `batches` batches of `limit` rows expired for `grace_us`.
    Schedule<'a> {
        schedule: &'a str = Schedule,
        every_s: i64 = EverySecs,
        limit: i64 = Limit,
        grace_us: i64 = GraceUs,
        batches: i64 = Batches,
    }

    /// A semaphore and the N a caller gives it: `name` is the semaphore's name.
    Permits<'a> {
        name: &'a str = Key,
        permits: i64 = Permits,
    }

    /// The slots of a semaphore of `permits` slots, on the keys `prefix` and the slot's
    /// number: its holders, or `count` of its free slots taken by `owner` for `ttl_us`.
    ///
    /// `presence` as for [`Acquire`]; `gone`: a JSON array of owners whose markers the
    /// caller found free and holds (SQLite; `"[]"` for none), whose live permits may be
    /// taken.
    Slots<'a> {
        prefix: &'a str = Prefix,
        owner: &'a str = Owner,
        permits: i64 = Permits,
        count: i64 = Count,
        ttl_us: i64 = TtlUs,
        presence: &'a str = Presence,
        gone: &'a str = Gone,
    }
}
