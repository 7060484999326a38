//! The records a flow handed to its producers and has not heard back about. A delivery report
//! carries only a [`Ticket`], a plain integer that librdkafka stores as the record's opaque
//! pointer, so handing a record over allocates nothing; the table keeps the rest.

use crate::record::{SlotId, SourceOffset};

/// A delivery report's opaque: a record's place in [`InFlight`], or [`POSITION_TICKET`].
pub type Ticket = usize;

/// The ticket of a position write, which needs no entry.
pub const POSITION_TICKET: Ticket = usize::MAX;

/// What the produce stage remembers of a record until the target answers for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Its source partition.
    pub slot: SlotId,
    /// Its source offset.
    pub offset: SourceOffset,
    /// Its timestamp, for the latency measure.
    pub timestamp: i64,
    /// Its size, for the byte count.
    pub bytes: usize,
    /// Whether the policy routed it away from its remote topic (then it is no mirror and gets
    /// no offset sync).
    pub routed: bool,
}

/// Records in flight, by ticket; freed tickets are issued again, so the table is as large as
/// the most records ever in flight at once (bounded by the producer's queue).
#[derive(Debug, Default)]
pub struct InFlight {
    entries: Vec<Option<Sent>>,
    free: Vec<Ticket>,
}

impl InFlight {
    /// Notes `sent` and returns its ticket.
    pub fn issue(&mut self, sent: Sent) -> Ticket {
        match self.free.pop() {
            Some(ticket) => {
                self.entries[ticket] = Some(sent);
                ticket
            }
            None => {
                self.entries.push(Some(sent));
                self.entries.len() - 1
            }
        }
    }

    /// The record of `ticket`, once: the ticket is free again after this. `None` for a ticket
    /// never issued or already settled.
    pub fn settle(&mut self, ticket: Ticket) -> Option<Sent> {
        let sent = self.entries.get_mut(ticket)?.take()?;
        self.free.push(ticket);
        Some(sent)
    }

    /// Records in flight.
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Whether no record is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sent(offset: i64) -> Sent {
        Sent { slot: 1, offset: SourceOffset(offset), timestamp: 0, bytes: 10, routed: false }
    }

    #[test]
    fn a_ticket_answers_once_and_is_issued_again() {
        let mut f = InFlight::default();
        let (a, b) = (f.issue(sent(1)), f.issue(sent(2)));
        assert_ne!(a, b);
        assert_eq!(f.settle(a), Some(sent(1)));
        assert_eq!(f.settle(a), None, "a second report of one ticket is ignored");
        assert_eq!(f.settle(POSITION_TICKET), None);
        assert_eq!(f.issue(sent(3)), a, "the freed ticket");
        assert_eq!(f.len(), 2);
    }

    proptest! {
        /// However issues and settlements interleave, each settlement returns exactly the
        /// record its ticket was issued for, and the table never outgrows the most records in
        /// flight at once.
        #[test]
        fn settlements_match_issues(ops in proptest::collection::vec(any::<(bool, u8)>(), 1..300)) {
            let mut f = InFlight::default();
            let mut live: Vec<(Ticket, i64)> = Vec::new();
            let (mut next, mut most) = (0i64, 0usize);
            for (issue, pick) in ops {
                if issue || live.is_empty() {
                    let t = f.issue(sent(next));
                    prop_assert!(live.iter().all(|&(l, _)| l != t), "a live ticket issued twice");
                    live.push((t, next));
                    next += 1;
                } else {
                    let (t, offset) = live.swap_remove(pick as usize % live.len());
                    prop_assert_eq!(f.settle(t), Some(sent(offset)));
                }
                most = most.max(live.len());
                prop_assert_eq!(f.len(), live.len());
                prop_assert!(f.entries.len() <= most);
            }
        }
    }
}
