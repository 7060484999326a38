//! The strategy: when positions are taken, written and stored, and how transactions begin,
//! commit and abort, in each mode; and how a stopping flow drains.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Abort, Counts, Io, Mode, Outcome, PositionRecord, Write};

/// How long one call waits on an abort (librdkafka carries it on meanwhile) or on
/// acknowledgements. Never less, however little the pool's thread may wait: librdkafka gives
/// up the first phase of an abort that did not finish within the call, and a call with no wait
/// at all would start over every time. A lane may wait longer on a commit, which it must not
/// resume (see `Lanes::commit` in the produce stage).
const COMMIT_WAIT: Duration = Duration::from_millis(10);
/// How long a stopping transactional flow tries to abort: long enough for a reachable
/// coordinator; a frozen one leaves the transaction to `transaction.timeout.ms`.
pub(crate) const ABORT_WAIT: Duration = Duration::from_secs(5);
/// The share of a stop's time given to acknowledgements; the rest stores what they reached.
const RECORDS_SHARE: f32 = 0.7;
/// Transactional: the share of a stop's time by which the last transaction must have
/// committed; the rest is kept for aborting it, since the process may exit at the deadline.
const COMMIT_SHARE: f32 = 0.85;

/// Whether the produce stage may send a batch now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Send.
    Go,
    /// Do not: a commit is under way. `true` if this step did work.
    Hold(bool),
}

/// What one step of a stopping strategy did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Nothing yet: call again.
    Idle,
    /// Something moved: call again.
    Worked,
    /// Done: nothing is left open, the stage may end.
    Finished,
}

/// A flow's delivery strategy: see the [module](super).
pub struct Commit {
    mode: Mode,
    /// How often positions are stored; in the transactional mode, how often a transaction
    /// commits.
    interval: Duration,
    last_flush: Instant,
    /// Position records not yet taken by their producer (its queue was full), oldest first,
    /// with their lane.
    unstored: VecDeque<(usize, PositionRecord)>,
    /// Position records handed over but not yet known to be stored: counted once they are.
    unconfirmed: Counts,
    /// Transactional: the open transaction.
    txn: Option<Txn>,
    /// Set once the flow stops.
    draining: Option<Drain>,
    /// Transactional: set once a stopping strategy aborts what it could not commit.
    aborting: Option<Aborting>,
}

/// The open transaction of every lane.
struct Txn {
    began: Instant,
    /// Set while committing: no record is sent until the commit is done.
    committing: Option<Committing>,
    /// A position record of this transaction could not be written: it must not commit.
    unwritable: Option<String>,
}

/// A commit under way: first every record is acknowledged, then the positions they reach are
/// written into the same transactions and acknowledged, then each lane commits.
struct Committing {
    started: Instant,
    positions_queued: bool,
}

/// A stopping strategy waits for acknowledgements until `records_until`, stores the positions
/// they reached, and waits for those until `positions_until`.
struct Drain {
    records_until: Instant,
    positions_until: Instant,
    positions_queued: bool,
}

struct Aborting {
    why: String,
    until: Instant,
}

impl Commit {
    /// A strategy in `mode` that stores (or commits) every `interval`, starting at `now`.
    pub fn new(mode: Mode, interval: Duration, now: Instant) -> Self {
        Self {
            mode,
            interval,
            last_flush: now,
            unstored: VecDeque::new(),
            unconfirmed: Counts::default(),
            txn: None,
            draining: None,
            aborting: None,
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether the strategy has work of its own on a timer or queue, so the stage must be
    /// stepped even without input.
    pub fn busy(&self) -> bool {
        self.mode == Mode::Transactional || self.draining.is_some() || !self.unstored.is_empty()
    }

    /// Whether the flow stops: from now on only [`Commit::drain`] is called.
    pub fn stopping(&self) -> bool {
        self.draining.is_some() || self.aborting.is_some()
    }

    /// Whether a transaction is open.
    pub fn transaction_open(&self) -> bool {
        self.txn.is_some()
    }

    /// Before the stage sends a batch. Transactional: opens a transaction if none is, and runs
    /// the commit once one is due; records wait until it is done. An error stops the flow (call
    /// [`Commit::fail`]).
    pub fn before_send(&mut self, now: Instant, wait: Duration, io: &mut Io<'_>) -> Result<Gate, String> {
        if self.mode != Mode::Transactional {
            return Ok(Gate::Go);
        }
        let txn = match self.txn.as_mut() {
            Some(txn) => txn,
            None => {
                io.lane.begin().map_err(|e| format!("beginning a transaction failed: {e}"))?;
                self.txn.insert(Txn { began: now, committing: None, unwritable: None })
            }
        };
        if txn.committing.is_none() && now.saturating_duration_since(txn.began) >= self.interval {
            txn.committing = Some(Committing { started: now, positions_queued: false });
        }
        if txn.committing.is_none() {
            return Ok(Gate::Go);
        }
        self.commit_step(now, wait, io).map(Gate::Hold)
    }

    /// After the stage sent and polled. At-least-once: offset syncs go out, the fenced
    /// writer's outcome is taken in, and positions are stored when due.
    pub fn after_send(&mut self, now: Instant, io: &mut Io<'_>) -> Result<(), String> {
        if self.mode == Mode::Transactional {
            return Ok(());
        }
        io.report.readable();
        self.writer_outcome(Duration::ZERO, io)?;
        if now.saturating_duration_since(self.last_flush) >= self.interval {
            self.store(io);
            self.last_flush = now;
        }
        Ok(())
    }

    /// The flow stops, to be done by `deadline`: records already sent are waited for and the
    /// positions they reach stored (committed), or an open transaction aborted.
    pub fn stop(&mut self, now: Instant, deadline: Instant) {
        if self.draining.is_some() {
            return;
        }
        let window = deadline.saturating_duration_since(now);
        let positions_until =
            if self.mode == Mode::Transactional { now + window.mul_f32(COMMIT_SHARE) } else { deadline };
        self.draining = Some(Drain {
            records_until: now + window.mul_f32(RECORDS_SHARE),
            positions_until,
            positions_queued: false,
        });
    }

    /// The flow failed (`why`): nothing more is stored. `true` if an open transaction is being
    /// aborted (keep calling [`Commit::drain`]); `false` if the stage may end now.
    pub fn fail(&mut self, why: String, now: Instant) -> bool {
        self.draining.get_or_insert(Drain { records_until: now, positions_until: now, positions_queued: true });
        self.unstored.clear();
        self.end(why, now) == Progress::Worked
    }

    /// One step of a stopping strategy; never waits longer than `wait`.
    pub fn drain(&mut self, now: Instant, wait: Duration, io: &mut Io<'_>) -> Progress {
        if self.aborting.is_some() {
            return self.abort_step(now, io);
        }
        io.lane.poll(wait.min(COMMIT_WAIT));
        let transactional = self.mode == Mode::Transactional;
        // A position transaction under way ends first: the last positions go in a new one.
        if self.draining.as_ref().is_some_and(|d| !d.positions_queued && now < d.positions_until) {
            match self.writer_outcome(wait.min(COMMIT_WAIT), io) {
                Ok(true) => return Progress::Idle,
                Ok(false) => {}
                Err(e) => {
                    io.report.retrying(&format!("stopping without storing positions: {e}"));
                    return Progress::Finished;
                }
            }
        }
        let Some(drain) = self.draining.as_mut() else { return Progress::Finished };
        let in_flight = io.lane.in_flight();
        if !drain.positions_queued {
            if in_flight > 0 && now < drain.records_until {
                return Progress::Idle;
            }
            drain.positions_queued = true;
            if transactional {
                // A transaction with a record missing, or one that never began, must not commit.
                if io.book.refused() {
                    return self.end("stopping on a record the target refused".into(), now);
                }
                if in_flight > 0 || self.txn.is_none() {
                    return self.end("stopping before the target acknowledged the transaction's records".into(), now);
                }
            } else {
                io.report.readable();
            }
            self.store(io);
        }
        let writing = match self.writer_outcome(wait.min(COMMIT_WAIT), io) {
            Ok(writing) => writing,
            Err(e) => {
                io.report.retrying(&format!("stopping without storing positions: {e}"));
                return Progress::Finished;
            }
        };
        let stored = self.send_unstored(io) && io.lane.in_flight() == 0 && !writing;
        if transactional && self.txn.as_ref().is_some_and(|t| t.unwritable.is_some()) {
            return self.end("stopping with a transaction that lost a position write".into(), now);
        }
        let done = stored
            && (!transactional
                || match io.lane.commit(COMMIT_WAIT) {
                    Ok(committed) => committed,
                    Err(e) => return self.end(format!("the last transaction did not commit ({e})"), now),
                });
        let positions_until = self.draining.as_ref().map_or(now, |d| d.positions_until);
        if !done && now < positions_until {
            return Progress::Idle;
        }
        if !done {
            if transactional {
                return self.end("stopping before the last transaction committed".into(), now);
            }
            io.report.retrying("stopping before the target acknowledged everything; positions cover only what it did, a restart re-sends the rest");
        }
        if transactional && done {
            self.confirm(io);
            io.report.readable();
            self.txn = None;
        }
        Progress::Finished
    }

    /// A stopping strategy that cannot store more: an open transaction is aborted first.
    fn end(&mut self, why: String, now: Instant) -> Progress {
        if self.mode == Mode::Transactional && self.txn.is_some() {
            self.aborting = Some(Aborting { why, until: now + ABORT_WAIT });
            return Progress::Worked;
        }
        Progress::Finished
    }

    fn abort_step(&mut self, now: Instant, io: &mut Io<'_>) -> Progress {
        let Some(aborting) = &self.aborting else { return Progress::Finished };
        let failure = match io.lane.abort(COMMIT_WAIT) {
            Abort::Pending if now < aborting.until => return Progress::Idle,
            Abort::Pending => Some(format!("the coordinator did not answer within {ABORT_WAIT:?}")),
            Abort::Done => None,
            Abort::Failed(failure) => Some(failure),
        };
        io.report.aborted(&aborting.why, failure.as_deref());
        self.aborting = None;
        self.txn = None;
        self.unconfirmed = Counts::default();
        Progress::Finished
    }

    /// One step of a commit; `Ok(true)` if it did work.
    fn commit_step(&mut self, now: Instant, wait: Duration, io: &mut Io<'_>) -> Result<bool, String> {
        io.lane.poll(wait.min(COMMIT_WAIT));
        // A refused record must not be committed past: the stage sees the refusal at its next
        // step and stops the flow, which aborts.
        if io.lane.in_flight() > 0 || io.book.refused() || !self.send_unstored(io) {
            return Ok(false);
        }
        let Some(txn) = self.txn.as_mut() else { return Ok(false) };
        if let Some(e) = &txn.unwritable {
            return Err(format!("a position write failed ({e})"));
        }
        let Some(committing) = txn.committing.as_mut() else { return Ok(false) };
        if !committing.positions_queued {
            committing.positions_queued = true;
            self.store(io);
            return Ok(true);
        }
        let started = committing.started;
        if !io.lane.commit(COMMIT_WAIT).map_err(|e| format!("committing a transaction failed: {e}"))? {
            return Ok(false);
        }
        io.report.committed(now.saturating_duration_since(started));
        self.confirm(io);
        // Only now are the records the syncs point at readable on the target.
        io.report.readable();
        self.txn = None;
        Ok(true)
    }

    /// Takes in what became of the fenced writer's last batch, waiting at most `wait`; `true`
    /// while it is still being written. Refused positions are written again at the next flush
    /// if this process still owns them.
    fn writer_outcome(&mut self, wait: Duration, io: &mut Io<'_>) -> Result<bool, String> {
        let Some(writer) = io.writer.as_deref_mut() else { return Ok(false) };
        match writer.outcome(wait) {
            Outcome::Pending => Ok(true),
            Outcome::Idle => Ok(false),
            Outcome::Committed => {
                self.confirm(io);
                Ok(false)
            }
            Outcome::Failed(e) => {
                self.unconfirmed = Counts::default();
                io.report.retrying(&format!(
                    "positions not stored ({e}); they are written again while this process owns them"
                ));
                io.book.lost();
                Ok(false)
            }
            Outcome::Broken(e) => {
                io.book.lost();
                Err(format!("the position writer failed ({e})"))
            }
        }
    }

    /// Takes what the ledger says must be stored and hands it on; never waits: a full queue
    /// keeps the rest for the next step.
    fn store(&mut self, io: &mut Io<'_>) {
        // New writes only once the old ones are out, so the order (closed runs before the
        // position that follows them) holds and the queue stays small; one fenced transaction
        // at a time, the next takes what the ledger has then.
        if self.unstored.is_empty() && !io.writer.as_deref().is_some_and(|w| w.busy()) {
            let records = io.book.take();
            if !records.is_empty() {
                for record in records {
                    self.unconfirmed.add(record.counts);
                    // A position goes with the records it covers: through their lane.
                    if let Some(lane) = io.lane.lane_of(record.partition) {
                        self.unstored.push_back((lane, record));
                    }
                }
                match (self.mode, io.writer.as_deref_mut()) {
                    (Mode::Fenced, Some(writer)) => {
                        let batch = self.unstored.drain(..).map(|(_, record)| record).collect();
                        if !writer.hand_over(batch) {
                            io.book.lost();
                        }
                    }
                    (Mode::AtLeastOnce, _) => self.confirm(io),
                    _ => {}
                }
            }
        }
        self.send_unstored(io);
    }

    /// Counts the position records just known to be stored.
    fn confirm(&mut self, io: &mut Io<'_>) {
        let counts = std::mem::take(&mut self.unconfirmed);
        if !counts.is_empty() {
            io.report.stored(counts);
        }
    }

    /// Hands queued position records to their producers; `true` once none is left.
    fn send_unstored(&mut self, io: &mut Io<'_>) -> bool {
        while let Some((lane, record)) = self.unstored.front() {
            match io.lane.write(*lane, record) {
                Write::Taken => {
                    self.unstored.pop_front();
                }
                Write::Full => return false,
                Write::Failed(e) => {
                    self.unstored.clear();
                    match self.txn.as_mut() {
                        // The transaction must not commit records without the positions they reach.
                        Some(txn) if self.mode == Mode::Transactional => {
                            txn.unwritable.get_or_insert(e);
                        }
                        _ => {
                            io.report.retrying(&format!("a position write failed ({e}); rewriting positions"));
                            io.book.lost();
                        }
                    }
                    return true;
                }
            }
        }
        true
    }
}
