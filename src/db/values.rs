//! The typed requests statements are bound with: each kind of statement takes the
//! values it needs, by name, and nothing else.

use crate::support::strategy_kind::Strategy;

use super::statement::{json_array, Param, Value, Values};

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

/// An acquisition of `key` by `owner`, for `ttl_us`, recorded as `strategy` (a
/// strategy's name, or `write` for the write side of a read-write lock).
///
/// `presence`: the key of the owner's presence marker to record with the lease (`""`
/// for none); `gone`: an owner whose marker the caller found free and holds (SQLite;
/// `""` for none), whose live lease may be taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquire<'a> {
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) strategy: &'a str,
    pub(crate) ttl_us: i64,
    pub(crate) presence: &'a str,
    pub(crate) gone: &'a str,
}

impl Values for Acquire<'_> {
    type With<'a> = Acquire<'a>;

    const PARAMS: &'static [Param] = &[
        Param::Key,
        Param::Owner,
        Param::Strategy,
        Param::TtlUs,
        Param::Presence,
        Param::Gone,
    ];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Owner => Value::Text(self.owner),
            Param::Strategy => Value::Text(self.strategy),
            Param::TtlUs => Value::Int(self.ttl_us),
            Param::Presence => Value::Text(self.presence),
            Param::Gone => Value::Text(self.gone),
            _ => Value::Text(self.key),
        }
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

/// A name held in shared mode, as a hold of it takes, pushes or marks it: the name
/// `key`, the owner of the hold, how many holds it adds (`count`), and how long from
/// now it must last at least (`ttl_us`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Share<'a> {
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) count: i64,
    pub(crate) ttl_us: i64,
}

impl Values for Share<'_> {
    type With<'a> = Share<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Owner, Param::Count, Param::TtlUs];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Owner => Value::Text(self.owner),
            Param::Count => Value::Int(self.count),
            Param::TtlUs => Value::Int(self.ttl_us),
            _ => Value::Text(self.key),
        }
    }
}

/// A name held in shared mode pushed to expire no sooner than one of its holds: the
/// name `key`, the hold's key `hold` and owner `owner`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Push<'a> {
    pub(crate) key: &'a str,
    pub(crate) hold: &'a str,
    pub(crate) owner: &'a str,
}

impl Values for Push<'_> {
    type With<'a> = Push<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Hold, Param::Owner];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Hold => Value::Text(self.hold),
            Param::Owner => Value::Text(self.owner),
            _ => Value::Text(self.key),
        }
    }
}

/// The name a hold in shared mode holds, and the mode (`read` or `semaphore`, the
/// name's row's `lock_strategy` while so held), as
/// [`parent_of`](crate::support::validate::parent_of) tells them from the hold's key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parent<'a> {
    pub(crate) key: &'a str,
    pub(crate) kind: &'a str,
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

impl Values for Parent<'_> {
    type With<'a> = Parent<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Strategy];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Strategy => Value::Text(self.kind),
            _ => Value::Text(self.key),
        }
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

/// One grant, as the statements that act on it name it: its key, owner and token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held<'a> {
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) token: i64,
}

impl Values for Held<'_> {
    type With<'a> = Held<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Owner, Param::Token];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Owner => Value::Text(self.owner),
            Param::Token => Value::Int(self.token),
            _ => Value::Text(self.key),
        }
    }
}

/// The release of a grant taken with an at-least hold: the row is kept until
/// `at_least_us` after it was taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Release<'a> {
    pub(crate) held: Held<'a>,
    pub(crate) at_least_us: i64,
}

impl Values for Release<'_> {
    type With<'a> = Release<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Owner, Param::Token, Param::AtLeastUs];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::AtLeastUs => Value::Int(self.at_least_us),
            other => self.held.value(other),
        }
    }
}

/// A waiter's place in the fair strategy's queue: its key, owner and ticket (0 before
/// it has one), and the TTL its place lasts for unless renewed.
///
/// `presence`: the key of the waiter's presence marker, which its place records as it
/// joins and a grant as the waiter takes it up (`""` for none); `gone`: a JSON array of owners whose markers
/// the caller found free and holds (SQLite; `"[]"` for none), whose live lock a
/// handoff may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) ticket: i64,
    pub(crate) ttl_us: i64,
    pub(crate) presence: &'a str,
    pub(crate) gone: &'a str,
}

impl Values for Place<'_> {
    type With<'a> = Place<'a>;

    const PARAMS: &'static [Param] = &[
        Param::Key,
        Param::Owner,
        Param::Ticket,
        Param::TtlUs,
        Param::Presence,
        Param::Gone,
    ];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Owner => Value::Text(self.owner),
            Param::Ticket => Value::Int(self.ticket),
            Param::TtlUs => Value::Int(self.ttl_us),
            Param::Presence => Value::Text(self.presence),
            Param::Gone => Value::Text(self.gone),
            _ => Value::Text(self.key),
        }
    }
}

/// A held lock's presence marker to record: the key of `presence` (never `""`), in
/// the grant `held` names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Present<'a> {
    pub(crate) held: Held<'a>,
    pub(crate) presence: &'a str,
}

impl Values for Present<'_> {
    type With<'a> = Present<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Owner, Param::Token, Param::Presence];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Presence => Value::Text(self.presence),
            other => self.held.value(other),
        }
    }
}

/// An election's claim: `identity` recorded as the leader of the grant's term.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub(crate) held: Held<'a>,
    pub(crate) identity: &'a str,
}

impl Values for Claim<'_> {
    type With<'a> = Claim<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Owner, Param::Token, Param::Identity];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Identity => Value::Text(self.identity),
            other => self.held.value(other),
        }
    }
}

/// A grant handed to the waiter of `ticket` on `key`, with its fencing token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark<'a> {
    pub(crate) key: &'a str,
    pub(crate) ticket: i64,
    pub(crate) token: i64,
}

impl Values for Mark<'_> {
    type With<'a> = Mark<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Ticket, Param::Token];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Ticket => Value::Int(self.ticket),
            Param::Token => Value::Int(self.token),
            _ => Value::Text(self.key),
        }
    }
}

/// An extension of a grant to at least `ttl_us` from now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extend<'a> {
    pub(crate) held: Held<'a>,
    pub(crate) ttl_us: i64,
}

impl Values for Extend<'_> {
    type With<'a> = Extend<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Owner, Param::Token, Param::TtlUs];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::TtlUs => Value::Int(self.ttl_us),
            other => self.held.value(other),
        }
    }
}

/// A batched renewal of `owner`'s leases of one TTL: `batch` is the JSON array of
/// `[key, token]` pairs, `[key, token, name]` for a hold of a name in shared mode (see
/// [`batch_json`](super::statement::batch_json)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renew<'a> {
    pub(crate) owner: &'a str,
    pub(crate) ttl_us: i64,
    pub(crate) batch: &'a str,
}

impl Values for Renew<'_> {
    type With<'a> = Renew<'a>;

    const PARAMS: &'static [Param] = &[Param::Owner, Param::TtlUs, Param::Batch];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Owner => Value::Text(self.owner),
            Param::TtlUs => Value::Int(self.ttl_us),
            _ => Value::Text(self.batch),
        }
    }
}

/// One batch of the sweep: rows expired for longer than `grace_us`, `limit` at most;
/// `claimed` is the JSON array of the keys a first step claimed (MariaDB).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sweep<'a> {
    pub(crate) grace_us: i64,
    pub(crate) limit: i64,
    pub(crate) claimed: &'a str,
}

impl Values for Sweep<'_> {
    type With<'a> = Sweep<'a>;

    const PARAMS: &'static [Param] = &[Param::GraceUs, Param::Limit, Param::Batch];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::GraceUs => Value::Int(self.grace_us),
            Param::Limit => Value::Int(self.limit),
            _ => Value::Text(self.claimed),
        }
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

/// The for-update strategy's bound on its row lock wait (PostgreSQL's `lock_timeout`)
/// and the key's gate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound<'a> {
    pub(crate) key: &'a str,
    pub(crate) wait_us: i64,
}

impl Values for Bound<'_> {
    type With<'a> = Bound<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::WaitUs];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::WaitUs => Value::Int(self.wait_us),
            _ => Value::Text(self.key),
        }
    }
}

/// The for-update strategy's grant to `owner`, putting back `setting` (the
/// `lock_timeout` its bound replaced, on PostgreSQL).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowGrant<'a> {
    pub(crate) key: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) setting: &'a str,
}

impl Values for RowGrant<'_> {
    type With<'a> = RowGrant<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Owner, Param::Setting];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Owner => Value::Text(self.owner),
            Param::Setting => Value::Text(self.setting),
            _ => Value::Text(self.key),
        }
    }
}

/// A sweep scheduled inside the database: a pg_cron `schedule`, or an event every
/// `every_s` seconds, of `batches` batches of `limit` rows expired for `grace_us`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule<'a> {
    pub(crate) schedule: &'a str,
    pub(crate) every_s: i64,
    pub(crate) limit: i64,
    pub(crate) grace_us: i64,
    pub(crate) batches: i64,
}

impl Values for Schedule<'_> {
    type With<'a> = Schedule<'a>;

    const PARAMS: &'static [Param] = &[
        Param::Schedule,
        Param::EverySecs,
        Param::Limit,
        Param::GraceUs,
        Param::Batches,
    ];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Schedule => Value::Text(self.schedule),
            Param::EverySecs => Value::Int(self.every_s),
            Param::Limit => Value::Int(self.limit),
            Param::GraceUs => Value::Int(self.grace_us),
            _ => Value::Int(self.batches),
        }
    }
}

/// A semaphore and the N a caller gives it: `name` is the semaphore's name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Permits<'a> {
    pub(crate) name: &'a str,
    pub(crate) permits: i64,
}

impl Values for Permits<'_> {
    type With<'a> = Permits<'a>;

    const PARAMS: &'static [Param] = &[Param::Key, Param::Permits];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Permits => Value::Int(self.permits),
            _ => Value::Text(self.name),
        }
    }
}

/// The slots of a semaphore of `permits` slots, on the keys `prefix` and the slot's
/// number: its holders, or `count` of its free slots taken by `owner` for `ttl_us`.
///
/// `presence` as for [`Acquire`]; `gone`: a JSON array of owners whose markers the
/// caller found free and holds (SQLite; `"[]"` for none), whose live permits may be
/// taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slots<'a> {
    pub(crate) prefix: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) permits: i64,
    pub(crate) count: i64,
    pub(crate) ttl_us: i64,
    pub(crate) presence: &'a str,
    pub(crate) gone: &'a str,
}

impl Values for Slots<'_> {
    type With<'a> = Slots<'a>;

    const PARAMS: &'static [Param] = &[
        Param::Prefix,
        Param::Owner,
        Param::Permits,
        Param::Count,
        Param::TtlUs,
        Param::Presence,
        Param::Gone,
    ];

    fn value(&self, param: Param) -> Value<'_> {
        match param {
            Param::Owner => Value::Text(self.owner),
            Param::Permits => Value::Int(self.permits),
            Param::Count => Value::Int(self.count),
            Param::TtlUs => Value::Int(self.ttl_us),
            Param::Presence => Value::Text(self.presence),
            Param::Gone => Value::Text(self.gone),
            _ => Value::Text(self.prefix),
        }
    }
}
