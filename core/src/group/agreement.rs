//! Members of one flow's group that run it with different settings.
//!
//! A flow's group is named by what its positions are keyed by (source, target, position topic),
//! so every process that stores positions in one topic is in one group, whatever else its config
//! says. Two members whose settings differ (a rolling config change, a SIGHUP that reached one
//! process first, another `tasks.max`) must not both copy: their tasks may split the partitions
//! differently, and their transactions would not fence each other. Each member tells the others
//! its settings, and since when it runs them, in its client id ([`Stamp`]); the newest settings
//! win. A member with older settings hands its tasks on and stays out of the group while a newer
//! one is in it; a member with the newest settings copies nothing until every member with other
//! settings has left. So whenever a member copies, every member of the group runs its settings.

use std::collections::BTreeMap;

/// The prefix of a member's client id; what follows is the flow, the settings and the time.
const PREFIX: &str = "strait-member.";

/// What a member tells the rest of its group about itself: the fingerprint of the settings it
/// runs the flow with, and since when (Unix milliseconds). Ordered by time, then fingerprint:
/// the greater stamp is the newer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// When the member started running these settings (its config loaded or reloaded).
    pub since: u64,
    /// The fingerprint of the flow's settings ([`crate::config::FlowConfig::fingerprint`]).
    pub settings: u64,
}

impl Stamp {
    /// The member's client id, which the coordinator shows every member of the group.
    ///
    /// ```
    /// use strait_core::group::Stamp;
    /// let stamp = Stamp { since: 1_700_000_000_000, settings: 0xab };
    /// let id = stamp.client_id("us-east->us-west");
    /// assert_eq!(id, "strait-member.us-east->us-west.00000000000000ab.1700000000000");
    /// assert_eq!(Stamp::parse(&id), Some(stamp));
    /// ```
    pub fn client_id(&self, flow: &str) -> String {
        format!("{PREFIX}{flow}.{:016x}.{}", self.settings, self.since)
    }

    /// The stamp in a member's client id; `None` for a client that is not a strait member.
    pub fn parse(client_id: &str) -> Option<Self> {
        let rest = client_id.strip_prefix(PREFIX)?;
        let mut parts = rest.rsplitn(3, '.');
        let since = parts.next()?.parse().ok()?;
        let settings = u64::from_str_radix(parts.next()?, 16).ok()?;
        parts.next()?;
        Some(Self { since, settings })
    }
}

/// Whether a member may copy its tasks, given the stamps of its group's members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agreement {
    /// Every member runs this member's settings: it copies its tasks.
    Agreed,
    /// Members with other, older settings are still in the group (or members that are not
    /// strait's, whose settings cannot be known): this member copies nothing until they left.
    Waiting {
        /// How many members run other settings.
        disagreeing: usize,
    },
    /// A member runs newer settings: this one hands its tasks on and stays out of the group
    /// while such a member is in it.
    Yielding {
        /// How many members run other settings.
        disagreeing: usize,
        /// The newest of them.
        newest: Stamp,
    },
}

impl Agreement {
    /// Whether the member copies its tasks.
    pub fn copies(&self) -> bool {
        matches!(self, Agreement::Agreed)
    }

    /// How many members run settings other than this member's.
    pub fn disagreeing(&self) -> usize {
        match self {
            Agreement::Agreed => 0,
            Agreement::Waiting { disagreeing } | Agreement::Yielding { disagreeing, .. } => *disagreeing,
        }
    }
}

/// What member `mine` may do in a group whose members' client ids gave `members` (this member
/// among them or not; `None` for a client id that is not a strait member's).
///
/// ```
/// use strait_core::group::{agreement, Agreement, Stamp};
/// let (old, new) = (Stamp { since: 1, settings: 7 }, Stamp { since: 2, settings: 9 });
/// assert_eq!(agreement(old, &[Some(old), Some(old)]), Agreement::Agreed);
/// assert_eq!(agreement(new, &[Some(old), Some(new)]), Agreement::Waiting { disagreeing: 1 });
/// assert_eq!(agreement(old, &[Some(old), Some(new)]), Agreement::Yielding { disagreeing: 1, newest: new });
/// ```
pub fn agreement(mine: Stamp, members: &[Option<Stamp>]) -> Agreement {
    let mut disagreeing = 0;
    let mut newest: Option<Stamp> = None;
    for member in members {
        match member {
            Some(other) if other.settings == mine.settings => {}
            Some(other) => {
                disagreeing += 1;
                if *other > mine {
                    newest = newest.max(Some(*other));
                }
            }
            None => disagreeing += 1,
        }
    }
    match newest {
        Some(newest) => Agreement::Yielding { disagreeing, newest },
        None if disagreeing > 0 => Agreement::Waiting { disagreeing },
        None => Agreement::Agreed,
    }
}

/// The group's members by the settings they run, newest first: (settings, newest stamp
/// running them, members), and the members that are not strait's. For `strait status`.
pub fn by_settings(members: &[Option<Stamp>]) -> (Vec<(u64, Stamp, usize)>, usize) {
    let mut groups: BTreeMap<u64, (Stamp, usize)> = BTreeMap::new();
    let mut foreign = 0;
    for member in members {
        match member {
            Some(stamp) => {
                let entry = groups.entry(stamp.settings).or_insert((*stamp, 0));
                entry.0 = entry.0.max(*stamp);
                entry.1 += 1;
            }
            None => foreign += 1,
        }
    }
    let mut out: Vec<(u64, Stamp, usize)> = groups.into_iter().map(|(s, (stamp, n))| (s, stamp, n)).collect();
    out.sort_by_key(|g| std::cmp::Reverse(g.1));
    (out, foreign)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stamp() -> impl Strategy<Value = Option<Stamp>> {
        // Few distinct times and settings, so that ties and agreements are common.
        prop_oneof![
            9 => (0u64..4, 0u64..3).prop_map(|(since, settings)| Some(Stamp { since, settings })),
            1 => Just(None),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Whenever members copy, they all run one set of settings, and every member of the
        /// group runs it: no partition is copied under two settings at once.
        #[test]
        fn members_that_copy_all_run_the_settings_of_every_member(members in prop::collection::vec(stamp(), 1..6)) {
            let copying: Vec<Stamp> = members.iter().flatten().copied().filter(|m| agreement(*m, &members).copies()).collect();
            if let Some(first) = copying.first() {
                prop_assert!(members.iter().all(|m| m.is_some_and(|m| m.settings == first.settings)));
            }
        }

        /// The newest member never yields, and once the members that yield to it have left,
        /// what remains agrees (unless a member is not strait's).
        #[test]
        fn the_newest_settings_win_once_the_others_left(members in prop::collection::vec(stamp(), 1..6)) {
            let Some(newest) = members.iter().flatten().max().copied() else { return Ok(()) };
            let newest_yields = matches!(agreement(newest, &members), Agreement::Yielding { .. });
            prop_assert!(!newest_yields);
            let stay: Vec<Option<Stamp>> =
                members.iter().copied().filter(|m| !m.is_some_and(|m| matches!(agreement(m, &members), Agreement::Yielding { .. }))).collect();
            let strangers = stay.iter().any(Option::is_none);
            let older_remain = stay.iter().flatten().any(|m| m.settings != newest.settings);
            prop_assert!(!older_remain, "a member with other settings stayed beside the newest: {stay:?}");
            prop_assert_eq!(agreement(newest, &stay).copies(), !strangers);
        }
    }

    #[test]
    fn a_restart_with_the_same_settings_is_no_disagreement() {
        let (a, b) = (Stamp { since: 10, settings: 5 }, Stamp { since: 20, settings: 5 });
        assert_eq!(agreement(a, &[Some(a), Some(b)]), Agreement::Agreed);
        assert_eq!(agreement(b, &[Some(a), Some(b)]), Agreement::Agreed);
    }

    #[test]
    fn settings_loaded_in_the_same_millisecond_are_told_apart_by_their_fingerprint() {
        let (a, b) = (Stamp { since: 10, settings: 5 }, Stamp { since: 10, settings: 6 });
        assert!(matches!(agreement(a, &[Some(a), Some(b)]), Agreement::Yielding { .. }));
        assert_eq!(agreement(b, &[Some(a), Some(b)]), Agreement::Waiting { disagreeing: 1 });
    }

    #[test]
    fn a_client_that_is_not_a_strait_member_holds_copying_back_and_is_counted() {
        let a = Stamp { since: 10, settings: 5 };
        assert_eq!(agreement(a, &[Some(a), None]), Agreement::Waiting { disagreeing: 1 });
        assert_eq!(Stamp::parse("rdkafka"), None);
        assert_eq!(Stamp::parse("strait-member.x.zz.1"), None);
        // Aliases may hold dots: the stamp is read from the end.
        let dotted = Stamp { since: 3, settings: 4 }.client_id("a.b->c.d");
        assert_eq!(Stamp::parse(&dotted), Some(Stamp { since: 3, settings: 4 }));
    }

    #[test]
    fn members_by_settings_put_the_newest_first() {
        let (a, b, c) =
            (Stamp { since: 1, settings: 5 }, Stamp { since: 3, settings: 5 }, Stamp { since: 2, settings: 6 });
        let (groups, foreign) = by_settings(&[Some(a), Some(b), Some(c), None]);
        assert_eq!(groups, vec![(5, b, 2), (6, c, 1)]);
        assert_eq!(foreign, 1);
    }
}
